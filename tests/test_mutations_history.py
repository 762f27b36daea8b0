"""Issue 35's classes 2 to 4 in the mutation suite: kernels that keep an earlier call's result,
that rewrite or skip NaN payloads, or that read misaligned inputs from the aligned base below them
(tests/mutants_history.py) must be flagged for their reason on seeds 0, 1 and 2, by the check built
for their class (the sibling call, the NaN payloads of the inputs and edge rows, the misaligned
class); correct kernels beside them (a workspace rewritten whole, a memo keyed on the values, NaNs
rewritten in a copy, the pointer read as given) must stay clean over 10 seeds. The tables have
tests/test_mutations.py's formats, to be merged into MUTANTS and CORRECT."""
import numpy as np
import pytest

import mutants_history as H
from conformance.generators import MISALIGNED
from conformance.misalign import PAD_BITS
from engine.providers.reference import EXACT, F64_ONCE, FORWARD, ROUNDED, TREE
from engine.types import BackendOp as Op
from test_mutations import ANY_ORDER, SEEDED, assert_caught, campaign, capsule

VALUE_REASONS = ("exceeds-bound", "nan-mismatch", "inf-mismatch", "signed-zero", "not-bitwise",
                 "not-correctly-rounded", "flushed-subnormal")
# a wrong value may show in the gradients of a local rule that reads the output, and in the
# fixed-order check; nothing else may
WRONG_VALUES = set(VALUE_REASONS) | {"vjp-" + r for r in VALUE_REASONS} | {"order-mismatch",
                                                                          "vjp-identity"}
NAN_SKIPPED = {"nan-mismatch", "vjp-nan-mismatch", "vjp-exceeds-bound", "vjp-not-bitwise",
               "vjp-inf-mismatch", "order-mismatch"}

# name: (op, forward, policy, vjp, declared, the reason it must be flagged for (or a tuple: one of
# them), the reasons allowed): tests/test_mutations.py's MUTANTS format
MUTANTS_HISTORY = {
    # class 2: call history
    "scale_returns_its_output_cached_by_shape": (
        Op.scale, H.OutputCachedByShape(FORWARD[Op.scale]), ROUNDED, None, None,
        VALUE_REASONS, WRONG_VALUES),
    "mean_rewrites_half_its_workspace_on_a_repeated_shape": (
        Op.reduce_mean, H.WorkspaceHalfRewritten(FORWARD[Op.reduce_mean]), TREE, None, None,
        VALUE_REASONS, WRONG_VALUES),
    "mul_vjp_returns_gradients_cached_by_shape": (
        Op.mul, lambda a, b: np.multiply(a, b, dtype=np.float32), ROUNDED,
        H.VJPCachedByShape(H.mul_vjp), None,
        tuple("vjp-" + r for r in VALUE_REASONS), {"vjp-" + r for r in VALUE_REASONS}),
    # class 3: NaN payloads
    "abs_canonicalises_the_nans_of_its_input": (
        Op.abs, H.abs_canonicalising_its_input, EXACT, None, None, "input-mutated",
        {"input-mutated"}),
    "max_canonicalises_the_nans_of_its_second_input": (
        Op.max, H.max_canonicalising_its_second_input, EXACT, None, None, "input-mutated",
        {"input-mutated"}),
    "sum_skips_nans": (Op.reduce_sum, H.sum_skipping_nans, ANY_ORDER, H.sum_vjp, None,
                       "nan-mismatch", NAN_SKIPPED),
    "max_pool_skips_nans": (Op.max_pool, H.max_pool_skipping_nans, EXACT, None, None,
                            "nan-mismatch", NAN_SKIPPED | {"inf-mismatch", "not-bitwise",
                                                           "vjp-identity"}),
    # class 4: alignment
    "add_reads_both_operands_from_their_aligned_base": (
        Op.add, H.add_reading_from_aligned_bases, ROUNDED, None, None, VALUE_REASONS,
        WRONG_VALUES),
    "concat_reads_its_last_input_from_its_aligned_base": (
        Op.concat, H.concat_reading_its_last_input_from_its_aligned_base, EXACT, None, None,
        VALUE_REASONS, WRONG_VALUES),
}

# name: (op, forward, policy, vjp): tests/test_mutations.py's CORRECT format
CORRECT_HISTORY = {
    "mean_rewrites_its_workspace_whole": (
        Op.reduce_mean, H.WorkspaceRewrittenWhole(FORWARD[Op.reduce_mean]), TREE, None),
    "scale_memo_keyed_on_the_values": (Op.scale, H.OutputCachedByValue(FORWARD[Op.scale]),
                                       ROUNDED, None),
    "mul_vjp_computed_every_call": (Op.mul, lambda a, b: np.multiply(a, b, dtype=np.float32),
                                    ROUNDED, H.mul_vjp),
    "max_canonicalises_nans_in_its_own_copy": (Op.max, H.max_canonicalising_a_copy, EXACT, None),
    "sum_propagates_nans": (Op.reduce_sum, H.sum_propagating_nans, ANY_ORDER, H.sum_vjp),
    "add_reads_where_its_operands_start": (Op.add, H.add_at_its_pointer, ROUNDED, None),
}
SEEDED_HISTORY = SEEDED + (MISALIGNED,)


def _from_sibling(ce) -> bool:
    return ce["case"]["note"].startswith("sibling of ")


def _nan_payload_rewritten(ce) -> bool:
    """The first changed input element held a NaN other than 0x7fc00000."""
    f = ce["failures"][0]
    return f["reason"] == "input-mutated" and f["expected"].startswith("0x") and \
        f["expected"] != "0x7fc00000" and np.isnan(np.uint32(int(f["expected"], 16)).view(
            np.float32))


def _misaligned(ce) -> bool:
    return ce["case"]["class"] == MISALIGNED


def _nan_row(ce) -> bool:
    """An edge case: the fixed NaN rows (the seeded special class has NaNs beside infinities)."""
    return ce["case"]["class"] == "edges"


# how each planted bug must have been found: the counterexample of its reason came from the check
# its class was built for
FOUND_BY = {
    "scale_returns_its_output_cached_by_shape": _from_sibling,
    "mean_rewrites_half_its_workspace_on_a_repeated_shape": _from_sibling,
    "mul_vjp_returns_gradients_cached_by_shape": _from_sibling,
    "abs_canonicalises_the_nans_of_its_input": _nan_payload_rewritten,
    "max_canonicalises_the_nans_of_its_second_input": _nan_payload_rewritten,
    "sum_skips_nans": _nan_row,
    "max_pool_skips_nans": lambda ce: True,
    "add_reads_both_operands_from_their_aligned_base": _misaligned,
    "concat_reads_its_last_input_from_its_aligned_base": _misaligned,
}


def _fresh(kernel):
    """A stateful kernel with no calls behind it: what a campaign finds must not depend on the
    campaigns that ran before it in this worker (the tables' own instances keep their state)."""
    return kernel.fresh() if hasattr(kernel, "fresh") else kernel


def _run(name, seed):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_HISTORY[name]
    return campaign(capsule(op, f"mutant.{name}", _fresh(forward), policy,
                            None if vjp is None else _fresh(vjp), declared), seed=seed)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(MUTANTS_HISTORY))
def test_planted_bug_is_flagged_for_its_reason(name, seed):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_HISTORY[name]
    result = _run(name, seed)
    assert_caught(result, reason, allowed)
    wanted = set(reason) if isinstance(reason, tuple) else {reason}
    found = [ce for ce in result["counterexamples"] if wanted & set(ce["reasons"])]
    assert found and any(FOUND_BY[name](ce) for ce in found), [ce["case"] for ce in found]


def test_a_nan_skipping_softmax_fails_on_the_edge_rows_every_seed_shares():
    """The softmax family's edge rows carry a NaN and no infinity too: a softmax whose max and
    sum skip NaNs (only the NaN entry itself NaN) fails on the fixed edge set, which every seed
    runs (so one run stands for all seeds)."""
    result = campaign(capsule(Op.softmax, "mutant.softmax_skips_nans", H.softmax_skipping_nans,
                              ROUNDED, None, F64_ONCE), only=("edges",))
    assert_caught(result, "nan-mismatch", {"nan-mismatch", "vjp-nan-mismatch",
                                           "vjp-exceeds-bound", "vjp-inf-mismatch"})


def test_the_history_bugs_pass_without_their_siblings(monkeypatch):
    """The blind spot is real: without the sibling calls (the plan of before) the cached and
    half-rewritten kernels pass the edge set, repeat check included."""
    from conformance import campaign as C
    real = C.campaign_plan
    monkeypatch.setattr(C, "campaign_plan", lambda op, classes, settings: [
        entry for entry in real(op, classes, settings) if entry[2] == C.CASE])
    for name in ("scale_returns_its_output_cached_by_shape",
                 "mean_rewrites_half_its_workspace_on_a_repeated_shape"):
        op, forward, policy, vjp, declared, *_ = MUTANTS_HISTORY[name]
        result = campaign(capsule(op, f"mutant.{name}", _fresh(forward), policy, vjp, declared),
                          only=("edges",))
        assert result["status"] == "passed", (name, result["failure_reasons"])


def test_the_misaligned_read_is_right_on_aligned_copies_and_reads_the_padding_otherwise():
    from conformance.misalign import upload
    x = np.arange(1, 8, dtype=np.float32)
    assert np.array_equal(H.read_from_aligned_base(x.copy()), x)
    got = H.read_from_aligned_base(upload(x, np, 8))
    assert np.array_equal(got.view(np.uint32)[:2], np.full(2, PAD_BITS, np.uint32))
    assert np.array_equal(got[2:], x[:-2])


@pytest.mark.parametrize("name", sorted(CORRECT_HISTORY))
def test_correct_kernels_pass_the_edge_set(name):
    op, forward, policy, vjp = CORRECT_HISTORY[name]
    result = campaign(capsule(op, f"correct.{name}", _fresh(forward), policy, vjp))
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"],
                                          result["counterexamples"][:1])
    assert result["cases"]["by_class"]["edges"]["run"] > 0


@pytest.mark.parametrize("seed", range(1, 10))
@pytest.mark.parametrize("name", sorted(CORRECT_HISTORY))
def test_correct_kernels_pass_over_ten_seeds(name, seed):
    op, forward, policy, vjp = CORRECT_HISTORY[name]
    result = campaign(capsule(op, f"correct.{name}", _fresh(forward), policy, vjp), seed=seed,
                      only=SEEDED_HISTORY)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])
    assert result["cases"]["by_class"][MISALIGNED]["run"] > 0
