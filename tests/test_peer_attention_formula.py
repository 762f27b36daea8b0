"""PyTorch's scaled_dot_product_attention as its page's reference implementation computes it
(conformance/peers/torch_rows.attention_blocked_key_nan): a blocked key's infinite or NaN data
reaches the output and the gradients as NaN (0 * inf, NaN + -inf), a convention of PyTorch's
documented formula where TorchLean never reads a blocked key. Checked on small cases worked by
hand, and on the case the H100 audit of 2026-12-07 recorded (evidence/h100-runs/2026-12-07c)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conformance.peers import accuracy as A
from conformance.peers.contract import ConventionCase
from conformance.peers.rejudge import rejudge, replay_class
from conformance.peers.torch_contract import contracts
from conformance.peers.torch_rows import attention_blocked_key_nan

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "evidence" / "h100-runs" / "2026-12-07c" / "sdpa-blocked-key"
# seed 4771404705468317223: every key of the query blocked, the values infinite and NaN
DEAD_ROW = REPO / "evidence" / "h100-runs" / "2026-12-07f" / "sdpa-dead-row"
F32 = np.float32
INF, NAN = np.inf, np.nan


def _case(v, k=((1.0,), (0.5,), (-1.0,)), mask=(False, True, False), grad=None, g=None):
    q = np.array([[1.0]], F32)
    k, v = np.array(k, F32), np.array(v, F32)
    out = np.zeros((1, v.shape[1]), F32)
    return ConventionCase((q, k, v), {"mask": np.array([mask]), "scale": 1.0}, out,
                          None if g is None else np.array(g, F32), grad)


def test_a_blocked_keys_infinite_value_makes_its_column_nan():
    governed, value = attention_blocked_key_nan(_case([[INF, 1.0], [2.0, 3.0], [4.0, 5.0]]))
    assert governed.tolist() == [[True, False]] and np.isnan(value).all()


def test_finite_blocked_data_governs_nothing():
    governed, _ = attention_blocked_key_nan(_case([[1e30, 1.0], [2.0, 3.0], [4.0, -1e30]]))
    assert not governed.any()


def test_a_participating_keys_infinity_is_not_this_clause():
    """inf * P with P > 0 is inf, as TorchLean's reference has it: nothing to explain."""
    governed, _ = attention_blocked_key_nan(_case([[1.0, 1.0], [INF, 3.0], [4.0, 5.0]]))
    assert not governed.any()


def test_a_blocked_nan_score_makes_the_whole_row_nan():
    """NaN + (-inf bias) is NaN: the softmax row, so every output of the query."""
    v = [[1.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    governed, _ = attention_blocked_key_nan(_case(v, k=((NAN,), (0.5,), (-1.0,))))
    assert governed.all()


def test_a_row_of_only_blocked_keys_multiplies_its_zeros_by_the_values_too():
    """_safe_softmax's zeros times an infinite value are NaN, as PyTorch gave on the H100
    (2026-12-07f); finite values there give the 0 of the other clause, governed by it alone."""
    dead = (False, False, False)
    governed, value = attention_blocked_key_nan(_case([[INF, 1.0], [2.0, 3.0], [4.0, 5.0]],
                                                      mask=dead))
    assert governed.tolist() == [[True, False]] and np.isnan(value).all()
    g = [[1.0, 1.0]]
    dq, _ = attention_blocked_key_nan(_case([[INF, 1.0], [2.0, 3.0], [4.0, 5.0]], mask=dead,
                                            grad=0, g=g))
    assert dq.tolist() == [[True]]                  # dS = 0 * (inf - c): NaN
    finite, _ = attention_blocked_key_nan(_case([[1e30, 1.0], [2.0, 3.0], [4.0, 5.0]],
                                                mask=dead))
    assert not finite.any()
    dq, _ = attention_blocked_key_nan(_case([[1e30, 1.0], [2.0, 3.0], [4.0, 5.0]], mask=dead,
                                            grad=0, g=g))
    assert not dq.any()


def test_the_vjp_follows_the_formulas_autograd():
    """dP = g v^T is infinite at the blocked key 0, c = sum P dP = 0 * inf = NaN, so dS, dq and
    every dk are NaN; dv = P^T g reads no infinity and stays finite."""
    v = [[INF, 1.0], [2.0, 3.0], [4.0, 5.0]]
    g = [[1.0, 1.0]]
    dq, _ = attention_blocked_key_nan(_case(v, grad=0, g=g))
    dk, _ = attention_blocked_key_nan(_case(v, grad=1, g=g))
    dv, _ = attention_blocked_key_nan(_case(v, grad=2, g=g))
    assert dq.tolist() == [[True]] and dk.all() and not dv.any()


def _recorded(run=RECORDED):
    record = json.loads((run / "aten.scaled_dot_product_attention.json").read_text())
    (replay,) = [json.loads(p.read_text()) for p in (run / "replays").glob("*.json")]
    return record, replay


def _shrunk_failures(record) -> list[dict]:
    """The failing elements of the record's shrunk cases: the ones its replay file indexes."""
    return [f for ce in record["counterexamples"] for f in ce.get("shrunk_failures") or []]


@pytest.mark.parametrize("run,outputs", [(RECORDED, {"value", "grad[1]"}),
                                         (DEAD_ROW, {"value", "grad[0]"})],
                         ids=["blocked-keys-2026-12-07c", "fully-blocked-row-2026-12-07f"])
def test_each_recorded_element_is_pytorchs_formula(run, outputs):
    """PyTorch 2.11 on the H100, each recorded element the clause's. 2026-12-07c: NaN where the
    one participating key's value is finite and the two blocked keys hold infinities and NaNs
    (forward and dk). 2026-12-07f (seed 4771404705468317223): a query whose three keys are all
    blocked, values holding infinities and NaNs, NaN in the output and dq where TorchLean gives
    0; the clause then left such a row to attention-neg-inf-row-zero (0), and the audit left it
    a failure of PyTorch's."""
    record, replay = _recorded(run)
    contract = contracts()["aten.scaled_dot_product_attention"]
    shrunk = _shrunk_failures(record)
    assert {f["output"] for f in shrunk} == outputs
    for failure in shrunk:
        assert replay_class(contract, failure, replay) == (A.CONVENTION,
                                                           "attention-blocked-key-nan")
    judged = {r.reason: r for r in rejudge(record, run).reasons}
    assert set(judged) == {"nan-mismatch", "vjp-nan-mismatch"}
    assert all(r.cls == A.CONVENTION and A.DEFECT not in r.recorded for r in judged.values())
    if run == DEAD_ROW:
        assert replay["case"]["seed"] == 4771404705468317223
        assert not np.any(replay["case"]["params"]["mask"]["__array__"]["data"])


@pytest.mark.parametrize("output", ["value", "grad[1]"])
def test_a_nan_where_the_formula_is_finite_stays_a_defect(output):
    """The same case with the blocked keys' data made finite: PyTorch's formula gives a number
    there, so a NaN is no convention."""
    record, replay = _recorded()
    replay = json.loads(json.dumps(replay))
    data = replay["case"]["inputs"][2]["data"]
    replay["case"]["inputs"][2]["data"] = [
        h if np.isfinite(np.array([int(h, 16)], np.uint32).view(F32)[0]) else "0x3f800000"
        for h in data]
    shrunk = _shrunk_failures(record)
    (failure,) = [f for f in shrunk if f["output"] == output][:1]
    contract = contracts()["aten.scaled_dot_product_attention"]
    assert replay_class(contract, failure, replay)[0] == A.DEFECT
