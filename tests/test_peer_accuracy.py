"""A peer's findings by class (conformance/peers/accuracy.py, rejudge.py): a convention difference
never counts as a failure, a violation of the peer's own contract (its documented semantics or a
documented bound, or a result without a correct digit) always does, and accuracy the peer does not
document is listed with its measured figure, not a failure. Checked on CPU stand-ins
(fixtures/plugins/peer_accuracy.py: each departure and an honest neighbour) and on the records
PyTorch 2.11's CUDA kernels left in evidence/h100 and JAX's CPU kernels in evidence/jax-cpu."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance import evidence
from conformance.campaign import Settings, run_campaign
from conformance.fingerprint import fingerprint
from conformance.peers import accuracy as A
from conformance.peers.classify import in_words
from conformance.peers.contracts import contract_for
from conformance.peers.rejudge import rejudge, rejudge_directory
from conformance.peers.torch_contract import contracts
from conformance.trust import campaign_problem
from fixtures.plugins.peer_accuracy import ENTRIES

REPO = Path(__file__).resolve().parent.parent
F32 = np.float32
H100 = REPO / "evidence" / "h100"
FIXTURE = "fixtures.plugins.peer_accuracy:ENTRIES"


def _classes(reason, got, exact, ulps, bound):
    defect, undocumented = A.classes(np.array([reason], dtype=object), np.array([got]),
                                     np.array([exact]), np.array([ulps]), bound)
    assert bool(defect[0]) != bool(undocumented[0])
    return A.DEFECT if defect[0] else A.UNDOCUMENTED


@pytest.mark.parametrize("reason, got, exact, ulps, bound, cls", [
    ("nan-mismatch", np.nan, 0.0, 0.0, None, A.DEFECT),            # NaN for a number
    ("inf-mismatch", np.inf, 3e38, 1.0, None, A.DEFECT),           # infinity for a number
    ("poison-in-output", 0.0, 0.0, 0.0, None, A.DEFECT),           # never written
    ("not-bitwise", 2.0, 1.0, 8e6, 0.0, A.DEFECT),                 # a wrong selection
    ("exceeds-bound", 1.0001, 1.0, 840.0, None, A.UNDOCUMENTED),   # correct digits, no bound
    ("exceeds-bound", -1e-8, 1e-8, 1e9, None, A.DEFECT),           # wrong sign
    ("exceeds-bound", 0.0, 1e-20, 1e9, None, A.DEFECT),            # zero for a normal number
    ("exceeds-bound", 1e-20, 0.0, 1e9, None, A.DEFECT),            # a number for zero
    ("flushed-subnormal", 0.0, 1e-40, 1.0, None, A.DEFECT),        # no correct digit
    ("signed-zero", -0.0, 0.0, 0.0, None, A.UNDOCUMENTED),         # a zero's sign: no error
    ("exceeds-bound", 1.0, 1.0, 3.0, 2.0, A.UNDOCUMENTED),         # within 2 + the margin
    ("exceeds-bound", 1.0, 1.0, 3.5, 2.0, A.DEFECT),               # past expf's 2 ulp
    ("not-correctly-rounded", 1.0, 1.0, 1.0, 0.0, A.DEFECT),       # IEEE: 0 ulp, no margin
    ("not-correctly-rounded", 1.0, 1.0, 1.0, None, A.UNDOCUMENTED),
])
def test_the_classification_rules(reason, got, exact, ulps, bound, cls):
    assert _classes(reason, got, exact, ulps, bound) == cls


def _entry(name):
    return next(e for e in ENTRIES() if e.capsule.name == name)


def _campaign(name, contract):
    entry = _entry(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_campaign(entry.capsule, entry.handler(), Settings.for_run(None, 0, True),
                            contract=contract)


@pytest.mark.parametrize("name, ulps", [("aten.exp", 3.0), ("aten.sigmoid", 5.0)])
def test_accuracy_the_peer_does_not_break_is_listed_not_failed(name, ulps):
    """exp 2 ulps up (expf's documented 2 ulp met), sigmoid 3 up (PyTorch documents none)."""
    assert _campaign(name, None)["status"] == "failed"
    rec = _campaign(name, contracts()[name])
    assert rec["status"] == "passed", rec["failure_reasons"]
    figure = rec["differences"]["undocumented_accuracy"]["value"]
    assert figure["elements"] > 0 and figure["worst_ulps"] == ulps and figure["worst_ratio"] > 1
    assert set(figure["reasons"]) == {"exceeds-bound"}
    assert rec["differences"]["accuracy"]["ulps"] == contracts()[name].accuracy.ulps
    # it earns no trust in TorchLean's terms
    entry = _entry(name)
    record = evidence.make_record(entry.capsule, rec, fingerprint(entry.capsule, entry.handler()),
                                  "cpu", FIXTURE)
    why = campaign_problem(record, entry.capsule, entry.handler())
    assert why.startswith("meets PyTorch's own contract but differs from TorchLean's: "
                          "undocumented accuracy (value) x"), why
    pytest.importorskip("jsonschema", reason="the record's schema check needs jsonschema (the "
                        "test extra; the GPU machine has none)")
    evidence.validate(record)


@pytest.mark.parametrize("name, contract, reason", [
    ("user.exp_4ulp", "aten.exp", "exceeds-bound"),          # past the documented bound
    ("user.sigmoid_flush", "aten.sigmoid", "flushed-subnormal"),   # no correct digit
    ("user.sigmoid_nan", "aten.sigmoid", "nan-mismatch"),    # the documented semantics
])
def test_a_violation_of_the_peers_own_contract_always_fails(name, contract, reason):
    rec = _campaign(name, contracts()[contract])
    assert rec["status"] == "failed" and set(rec["failure_reasons"]) == {reason}
    assert rec["differences"]["undocumented_accuracy"] == {}


def test_a_difference_of_larger_terms_is_judged_at_their_scale():
    """Rule 2 at the terms' scale (operand_scale.py): layer_norm's 9.6e-6 for -5.5e-12 (the H100's
    finding) is far below its terms (|x| + |mean|) / sqrt(var + eps) and keeps the formula's
    digits; an error as large as the terms is still no correct digit."""
    def cls(got, exact, scale):
        defect, _ = A.classes(np.array(["exceeds-bound"], dtype=object), np.array([got]),
                              np.array([exact]), np.array([1e9]), None,
                              None if scale is None else np.array([scale]))
        return A.DEFECT if defect[0] else A.UNDOCUMENTED
    assert cls(9.6e-6, -5.5e-12, None) == A.DEFECT
    assert cls(9.6e-6, -5.5e-12, 80.0) == A.UNDOCUMENTED
    assert cls(100.0, -5.5e-12, 80.0) == A.DEFECT
    assert cls(0.0, 1e-40, 0.0) == A.DEFECT          # a scale of 0 (non-finite inputs): as before


def test_the_terms_scale_of_each_op():
    from types import SimpleNamespace as Case
    from conformance.peers import operand_scale
    x = np.array([[0.25, 0.25 + 2 ** -26, 0.25 - 2 ** -26]], F32)
    g, b = np.ones(3, F32), np.zeros(3, F32)
    s = operand_scale.scale("layer_norm", Case(inputs=(x, g, b), params={"eps": 1e-5}))
    mean = np.mean(x.astype(np.float64))
    var = np.mean((x.astype(np.float64) - mean) ** 2)
    assert np.allclose(s, (np.abs(x) + abs(mean)) / np.sqrt(var + float(F32(1e-5))), rtol=1e-12)
    a = np.array([33.0, 1.0], F32)
    lse = 33.0 + np.log1p(np.exp(-32.0))
    s = operand_scale.scale("log_softmax", Case(inputs=(a,), params={"axis": 0}))
    assert np.allclose(s, [33.0 + lse, 1.0 + lse], rtol=1e-12)
    xb = np.ones((2, 3, 4), F32)
    assert operand_scale.scale("batch_norm", Case(inputs=(xb, np.ones(3, F32), np.zeros(3, F32)),
                                                  params={})).shape == xb.shape
    assert operand_scale.scale("gelu", Case(inputs=(a,), params={})) is None
    assert operand_scale.scale("sigmoid", Case(inputs=(a,), params={})) is None


def test_recorded_log_softmax_cancellation_is_undocumented_accuracy():
    """PyTorch's 0 for log_softmax([32.99, 1])[0] = -1.28e-14 (H100): its lse rounds to a0."""
    from conformance.peers.rejudge import replay_class
    replay = json.loads((REPO / "evidence/h100/replays/aten.log_softmax-cancellation-1.json")
                        .read_text())
    assert replay_class(contracts()["aten.log_softmax"], replay["failures"][0], replay) == \
        (A.UNDOCUMENTED, None)


def test_pytorchs_float32_log_softmax_meets_its_own_contract():
    """A float32 log_softmax fails TorchLean's bound (tiny log-probabilities rounded to 0) and
    passes PyTorch's contract, its excess listed as undocumented accuracy."""
    ours = _campaign("aten.log_softmax", None)
    assert ours["status"] == "failed" and "exceeds-bound" in ours["failure_reasons"]
    rec = _campaign("aten.log_softmax", contracts()["aten.log_softmax"])
    assert rec["status"] == "passed", rec["failure_reasons"]
    assert rec["differences"]["undocumented_accuracy"]["value"]["elements"] > 0


def test_in_words_lists_undocumented_accuracy():
    diff = {"clauses": {"tie-gradient-split": {"elements": 3}},
            "undocumented_accuracy": {"grad": {"elements": 5, "worst_ulps": 12.0}}}
    assert in_words(diff) == ("tie-gradient-split x3 elements, undocumented accuracy (grad) x5 "
                              "elements, worst 12 ulps")


# --- the recorded evidence --------------------------------------------------------------------

def _judged(directory: Path, name: str):
    record = json.loads((directory / f"{name}.json").read_text())
    return rejudge(record, directory)


def test_recorded_gelu_nan_is_a_defect_reported_upstream():
    j = _judged(H100, "aten.gelu")
    reasons = {r.reason: r for r in j.reasons}
    assert j.status == "failed"
    assert (reasons["nan-mismatch"].cls, reasons["nan-mismatch"].basis) == (A.DEFECT, "reason")
    assert reasons["nan-mismatch"].upstream == ["pytorch/pytorch#194278", "pytorch/pytorch#185770"]
    assert reasons["vjp-nan-mismatch"].cls == A.DEFECT
    assert reasons["vjp-nan-mismatch"].upstream == []      # the reports are of the forward
    # the recorded exceeds-bound elements keep their digits: undocumented, not a failure
    assert reasons["exceeds-bound"].cls == A.UNDOCUMENTED


def test_recorded_layer_norm_is_undocumented_accuracy_on_what_was_recorded():
    j = _judged(H100, "aten.layer_norm")
    (r,) = j.reasons
    assert (r.cls, r.basis, j.status) == (A.UNDOCUMENTED, "recorded", "undecided")
    assert r.worst_ratio > 1 and r.recorded == {A.UNDOCUMENTED: 12}


def test_recorded_relu_vjp_at_nan_is_a_convention():
    (r,) = _judged(H100, "aten.relu").reasons
    assert (r.reason, r.cls) == ("vjp-not-bitwise", A.CONVENTION)
    assert r.recorded[A.CONVENTION] > 0 and A.DEFECT not in r.recorded


def test_recorded_sigmoid_flush_and_batch_norm_raise_are_defects():
    (r,) = _judged(H100, "aten.sigmoid").reasons
    assert (r.reason, r.cls) == ("flushed-subnormal", A.DEFECT)
    raised = {x.reason: x for x in _judged(H100, "aten.batch_norm").reasons}["raised"]
    assert (raised.cls, raised.basis) == (A.DEFECT, "reason")


def test_rejudging_a_directory_touches_only_peer_records():
    judged = rejudge_directory(H100)
    assert {j.capsule for j in judged} == {p.stem for p in H100.glob("aten.*.json")}
    assert all(j.status == "passed" for j in judged if j.recorded_status == "passed")
    ours = json.loads((H100 / "cublas.matmul.json").read_text())
    assert rejudge(ours, H100) is None                     # our capsules keep their verdicts
    jax = {j.capsule: j for j in rejudge_directory(REPO / "evidence/jax-cpu/with-contract")}
    assert {r.cls for r in jax["xla.exp"].reasons} == {A.UNDOCUMENTED}   # JAX documents none


def test_only_the_plugin_spec_chooses_the_accuracy():
    assert contract_for("conformance.peers.torch_cuda:ENTRIES", "aten.exp").accuracy.ulps == 2.0
    assert contract_for(FIXTURE, "aten.exp") is None      # named like a peer: not ours


def test_classify_peers_command(tmp_path, capsys):
    from conformance.cli import main
    assert main(["classify-peers", str(H100)]) == 1          # defects are certain there
    out = capsys.readouterr().out
    assert "aten.gelu: failed -> failed" in out and "upstream pytorch/pytorch#194278" in out
    assert "aten.relu: failed -> undecided" in out
    assert main(["classify-peers", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["classify-peers", str(tmp_path)]) == 2       # no peer record there


def test_classify_peers_names_a_missing_directory(tmp_path):
    import subprocess
    import sys
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "classify-peers",
                           str(missing)], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"classify-peers: {missing} is not a directory; give the evidence directories that " \
           "hold the peers' aten.*/xla.*/cupy_peer.* records" in proc.stderr


@pytest.mark.parametrize("status", ["crashed", "timed-out", "harness-error", "interrupted",
                                    "unsupported"])
def test_a_record_that_judged_nothing_keeps_its_status(status, tmp_path, capsys):
    """A crashed peer kernel has no failure reason to classify: an empty list of reasons is not a
    pass (JAX's GPU audit of 2026-12-07 showed `xla.matmul: crashed -> passed`)."""
    record = json.loads((H100 / "aten.relu.json").read_text())
    record.update(status=status, failure_reasons={}, counterexamples=[])
    (tmp_path / "aten.relu.json").write_text(json.dumps(record))
    assert rejudge(record, tmp_path).status == status
    from conformance.cli import main
    code = main(["classify-peers", str(tmp_path)])
    assert f"aten.relu: {status} -> {status}" in capsys.readouterr().out
    assert code == (1 if status in ("crashed", "timed-out") else 0)


def test_a_passed_record_stays_passed_and_a_failure_without_reasons_stays_failed():
    record = json.loads((H100 / "aten.relu.json").read_text())
    record.update(status="passed", failure_reasons={}, counterexamples=[])
    assert rejudge(record, H100).status == "passed"
    record.update(status="failed")
    assert rejudge(record, H100).status == "failed"
