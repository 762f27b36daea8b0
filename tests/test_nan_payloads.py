"""NaN payloads (issue 35, class 3): the generators draw NaNs with other payloads than 0x7fc00000,
with the sign set and signalling ones, in the seeded inputs and the edge set; the reductions' and
the softmax family's edge rows hold a NaN without an infinity; the input check compares payloads
bit for bit; and the judge reads every such NaN as NaN (no harness error, no false alarm)."""
import math

import numpy as np
import pytest

from conformance import generators, samplers
from conformance.campaign import check_case
from conformance.generators import Case
from conformance.kernel_call import INPUT_MUTATED, _same_bits, call_forward, mutation_failures
from engine.registry import registry
from engine.runtime.poison import POISON_BITS
from engine.types import BackendOp as Op, Device

CANONICAL = 0x7FC00000
QUIET_BIT = 0x00400000
SIGN_BIT = 0x80000000


def _nan_bits(x) -> set[int]:
    x = np.asarray(x, np.float32).reshape(-1)
    return {int(b) for b in x.view(np.uint32)[np.isnan(x)]}


def test_the_payloads_are_nans_of_every_kind_and_never_the_poison():
    bits = np.array(samplers.NAN_PAYLOADS, np.uint32)
    assert np.all(np.isnan(bits.view(np.float32)))
    assert POISON_BITS not in samplers.NAN_PAYLOADS
    assert CANONICAL in samplers.NAN_PAYLOADS
    assert any(b & SIGN_BIT for b in samplers.NAN_PAYLOADS)              # x86's default NaN
    assert any(not b & QUIET_BIT for b in samplers.NAN_PAYLOADS)         # signalling
    drawn = samplers.nans(np.random.default_rng(0), (4000,))
    assert _nan_bits(drawn) == set(samplers.NAN_PAYLOADS)


@pytest.mark.parametrize("op, cls", [(Op.add, "special"), (Op.exp, "special"),
                                     (Op.relu, "edges"), (Op.gather, "edges")])
def test_inputs_carry_signalling_and_negative_nans(op, cls):
    seen = set()
    for i in range(generators.class_size(op, cls, 6)):
        seen |= set().union(*(_nan_bits(x) for x in generators.draw_case(op, 0, cls, i).inputs))
    assert seen - {CANONICAL}, seen
    assert any(not b & QUIET_BIT for b in seen) and any(b & SIGN_BIT for b in seen)
    assert POISON_BITS not in seen


def _rows(x, axes):
    red = sorted(a % x.ndim for a in axes)
    keep = [d for d in range(x.ndim) if d not in red]
    n = math.prod(x.shape[d] for d in red)
    return np.transpose(x, keep + red).reshape(-1, n) if x.size else np.zeros((0, n))


@pytest.mark.parametrize("op", [Op.reduce_sum, Op.reduce_mean, Op.softmax, Op.log_softmax,
                                Op.hard_masked_softmax])
def test_edge_rows_hold_one_nan_without_an_infinity(op):
    planted = 0
    for i, e in enumerate(generators.edge_set(op)):
        x = generators.draw_case(op, 0, generators.EDGES, i).inputs[0]
        rows = _rows(x, e.marked)
        nan_rows = np.flatnonzero(np.isnan(rows).any(axis=1))
        if rows.shape[0] >= 2 and rows.shape[1] >= 4:
            assert list(nan_rows) == [rows.shape[0] // 2], (i, e.shapes)
            row = rows[rows.shape[0] // 2]
            assert np.count_nonzero(np.isnan(row)) == 1 and not np.isinf(row).any()
            assert np.flatnonzero(np.isnan(row))[0] not in samplers.boundary_positions(row.size)
            planted += 1
        elif rows.shape[1] > 1:   # length-1 rows hold the special values on purpose (class 7)
            assert nan_rows.size == 0, (i, e.shapes)
    assert planted >= 8


def test_the_input_check_compares_nan_payloads_bit_for_bit():
    for before in samplers.NAN_PAYLOADS:
        for after in samplers.NAN_PAYLOADS:
            a = np.array([1.0, 0.0], np.float32)
            a.view(np.uint32)[1] = before
            b = a.copy()
            b.view(np.uint32)[1] = after
            diff = _same_bits(b, a)
            assert (diff is None) == (before == after)
            if diff is not None:
                assert diff.tolist() == [False, True]
    assert _same_bits(np.float32([-0.0]), np.float32([0.0])) is not None


def test_a_rewritten_payload_is_an_input_mutation_with_both_bit_patterns():
    original = np.array([1.0, 2.0, 3.0], np.float32)
    original.view(np.uint32)[1] = 0xFF812345
    handed = original.copy()
    np.copyto(handed, np.float32(np.nan), where=np.isnan(handed))
    [f] = mutation_failures({"input[0]": handed}, {"input[0]": original}, INPUT_MUTATED)
    assert (f.reason, f.element, f.expected, f.got) == (INPUT_MUTATED, [1], "0xff812345",
                                                        "0x7fc00000")


def test_call_forward_sees_a_kernel_canonicalise_its_input_and_not_an_honest_one():
    x = samplers.nans(np.random.default_rng(3), (16,))

    def canonicalising(a):
        np.copyto(a, np.float32(np.nan), where=np.isnan(a))
        return np.abs(a)

    def honest(a):
        return np.abs(a)

    for kernel, changed in ((canonicalising, True), (honest, False)):
        handler = type("H", (), {"forward": staticmethod(kernel)})
        for offsets in (None, (4,)):
            _, mutated = call_forward(handler, Device.cpu, (x,), {}, False, offsets)
            assert bool(mutated) == changed


def _with_payloads(shape, seed):
    """Normals with a third of the elements NaNs of every payload."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    return np.where(rng.random(shape) < 1 / 3, samplers.nans(rng, shape), x).astype(np.float32)


@pytest.mark.parametrize("op, params, shapes", [
    (Op.abs, {}, [(40,)]), (Op.relu, {}, [(40,)]), (Op.add, {}, [(40,), (40,)]),
    (Op.max, {}, [(40,), (40,)]), (Op.exp, {}, [(40,)]), (Op.sqrt, {}, [(40,)]),
    (Op.reduce_sum, {"axes": (1,), "keepdims": False}, [(8, 5)]),
    (Op.reduce_mean, {"axes": None, "keepdims": True}, [(3, 4)]),
    (Op.softmax, {"axis": -1}, [(6, 5)]), (Op.log_softmax, {"axis": 0}, [(6, 5)]),
    (Op.reshape, {"shape": (5, 8)}, [(40,)]), (Op.permute, {"perm": (1, 0)}, [(8, 5)]),
    (Op.matmul, {"trans_a": False, "trans_b": False}, [(3, 4), (4, 2)]),
    (Op.max_pool, {"kernel_size": (2,), "stride": (1,), "padding": (0,), "dilation": (1,)},
     [(2, 9)]),
])
def test_reference_capsules_judge_every_payload_as_nan(op, params, shapes):
    """Signalling and negative NaNs reach the references, the comparisons and the VJP check: the
    reference capsule passes, with no harness error."""
    cap, handler = registry().get(f"reference.{op.label}")
    for seed in range(3):
        case = Case(op, "special", tuple(_with_payloads(s, seed) for s in shapes), dict(params),
                    seed=seed)
        with np.errstate(all="ignore"):
            res = check_case(cap, handler, case, {})
        assert res.harness_error is None, res.harness_error
        assert not res.skipped and not res.failed, [f.line() for f in res.failures]
