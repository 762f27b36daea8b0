"""Issue 35, classes 1 and 5, proved on planted bugs (tests/mutants_sums.py): long reductions that
lose a term or a block of terms are flagged `exceeds-bound` on every seed (the exact-sums class and
the input-aware bound: conformance/exact_cases.py, exact_sums.py), and order claims are either
replayed by a program (selective_scan's recurrence, separate or fused: `order-mismatch`) or
refused (`unchecked-order-claim`). The correct kernels (the mutation suite's CORRECT table, this
file's CORRECT_SUMS and the reference capsules) stay clean over ten seeds of the new class.
MUTANTS_SUMS and CORRECT_SUMS use tests/test_mutations.py's tuple formats, for merging into its
tables (and so into scripts/mutation_table.py)."""
import dataclasses

import numpy as np
import pytest

import mutants as M
import mutants_sums as MS
from test_mutations import ANY_ORDER, CORRECT, LEFT, LEFT_FUSED, SEEDED, assert_caught, campaign, \
    capsule
from conformance import generators
from conformance.exact_cases import EXACT_SUMS
from engine.providers.reference import BLAS
from engine.registry import registry
from engine.types import BackendOp as Op, VJPMode

LOST = {"exceeds-bound", "nan-mismatch", "inf-mismatch"}   # a lost term that was an inf or a NaN

# name: (op, forward, policy, vjp, declared, the reason it must be flagged for, reasons allowed)
MUTANTS_SUMS = {
    # class 1: lost terms in long reductions
    "sum_drops_term_12288_of_long_rows": (Op.reduce_sum, MS.sum_dropping_term_12288, ANY_ORDER,
                                          M.sum_vjp, None, "exceeds-bound", LOST),
    "mean_drops_a_block_at_non_power_of_two_lengths": (Op.reduce_mean, MS.mean_dropping_a_block,
                                                       ANY_ORDER, MS.mean_vjp, None,
                                                       "exceeds-bound", LOST),
    "matmul_drops_k_5000_of_long_inner_dimensions": (Op.matmul, MS.matmul_dropping_one_k_term,
                                                     ANY_ORDER, None, None, "exceeds-bound", LOST),
    "scatter_add_loses_a_targets_4097th_update": (Op.scatter_add,
                                                  MS.scatter_add_losing_a_colliding_update,
                                                  ANY_ORDER, None, None, "exceeds-bound", LOST),
    "avg_pool_drops_window_cell_1024": (Op.avg_pool, MS.avg_pool_dropping_a_window_element,
                                        ANY_ORDER, None, None, "exceeds-bound", LOST),
    # class 5: order and contraction claims
    "scan_fma_claiming_separate_fixed_left": (Op.selective_scan, MS.scan_fma, LEFT, None, None,
                                              "order-mismatch", {"order-mismatch"}),
    "chunked_scan_claiming_fixed_left": (Op.selective_scan, MS.scan_chunked, LEFT, None, None,
                                         "order-mismatch", {"order-mismatch"}),
    "mse_claiming_an_order_nothing_checks": (Op.mse_loss, MS.mse_pairwise, LEFT, None, None,
                                             "unchecked-order-claim", {"unchecked-order-claim"}),
}

# name: (op, forward, policy, vjp): other valid orders, which must stay clean. (This file audits
# the selective_scan entries forward only, `audited` below: merged into test_mutations.py's tables
# their VJP would be the engine's tape rule, audited against an mpmath reference that costs some
# 35 s of one core per campaign.)
CORRECT_SUMS = {
    "sum_in_blocks_of_1024": (Op.reduce_sum, MS.sum_in_blocks, ANY_ORDER, M.sum_vjp),
    "pairwise_mean": (Op.reduce_mean, MS.mean_pairwise, ANY_ORDER, MS.mean_vjp),
    "float32_blas_linear": (Op.linear, MS.linear_float32, BLAS, None),
    "reversed_scatter_add": (Op.scatter_add, MS.scatter_add_reversed, ANY_ORDER, None),
    "left_fold_avg_pool": (Op.avg_pool, MS.avg_pool_float32_left, ANY_ORDER, None),
    "fma_scan_claiming_fixed_left_fused": (Op.selective_scan, MS.scan_fma, LEFT_FUSED, None),
    "chunked_scan_claiming_any_order": (Op.selective_scan, MS.scan_chunked, ANY_ORDER, None),
}


def audited(op, name, forward, policy, vjp=None, declared=None):
    """The capsule and handler of a table entry. selective_scan's are audited forward only: their
    bugs are in the forward, their VJP would be the engine's tape rule (which the reference
    campaign audits), and its mpmath reference costs some 35 s a campaign on one CPU core."""
    cap, handler = capsule(op, name, forward, policy, vjp, declared)
    if op is Op.selective_scan:
        cap = dataclasses.replace(cap, vjp_mode=VJPMode.none)
    return cap, handler


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(MUTANTS_SUMS))
def test_planted_bug_is_flagged_for_its_reason(name, seed):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_SUMS[name]
    result = campaign(audited(op, f"mutant.{name}", forward, policy, vjp, declared), seed=seed)
    assert_caught(result, reason, allowed)
    covered = {r for ce in result["counterexamples"] for r in ce["reasons"]}
    assert covered == set(result["failure_reasons"])


@pytest.mark.parametrize("name", sorted(n for n, m in MUTANTS_SUMS.items()
                                        if generators.OP_SPECS[m[0]].exact_sums is not None))
def test_lost_terms_are_caught_by_the_exact_sums_class_on_its_own(name):
    """The class alone catches them, on its first case (a long reduction) of every seed."""
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_SUMS[name]
    for seed in range(3):
        result = campaign(capsule(op, f"mutant.{name}", forward, policy, vjp, declared),
                          seed=seed, cases=1, only=(EXACT_SUMS,))
        assert_caught(result, reason, allowed)


def _clean(op, forward, policy, vjp, name, seed, only):
    result = campaign(audited(op, name, forward, policy, vjp), seed=seed, only=only)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"],
                                          result["counterexamples"][:1])
    assert result["cases"]["total"] > 0
    return result


EXACT_CORRECT = {**{n: c for n, c in CORRECT.items()
                    if generators.OP_SPECS[c[0]].exact_sums is not None},
                 **{n: c for n, c in CORRECT_SUMS.items()
                    if generators.OP_SPECS[c[0]].exact_sums is not None}}


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", sorted(EXACT_CORRECT))
def test_correct_orders_pass_the_exact_sums_class_over_ten_seeds(name, seed):
    op, forward, policy, vjp = EXACT_CORRECT[name]
    result = _clean(op, forward, policy, vjp, f"correct.{name}", seed, (EXACT_SUMS,))
    worst = result["stats"]["forward"]["worst_ratio"]
    assert worst == 0.0 or op in (Op.reduce_mean, Op.avg_pool), worst   # exact, bit for bit


REFERENCE_EXACT = sorted(c.name for c in registry().capsules()
                         if c.name.startswith("reference.")
                         and generators.OP_SPECS.get(c.op) is not None
                         and generators.OP_SPECS[c.op].exact_sums is not None)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", REFERENCE_EXACT)
def test_reference_capsules_pass_the_exact_sums_class_over_ten_seeds(name, seed):
    result = campaign(registry().get(name), seed=seed, only=(EXACT_SUMS,))
    assert result["status"] == "passed", (result["failure_reasons"], result["counterexamples"][:1])


@pytest.mark.parametrize("seed", range(1, 10))
@pytest.mark.parametrize("name", sorted(n for n, c in CORRECT_SUMS.items()
                                        if c[0] is Op.selective_scan))
def test_correct_scan_orders_pass_over_ten_seeds(name, seed):
    op, forward, policy, vjp = CORRECT_SUMS[name]
    result = _clean(op, forward, policy, vjp, f"correct.{name}", seed, SEEDED)
    if policy is LEFT_FUSED:
        assert result["observed"]["fixed_order_checks"] == result["cases"]["total"]
        assert result["observed"]["order_claim"] == "program"


@pytest.mark.parametrize("name", sorted(CORRECT_SUMS))
def test_correct_orders_pass_the_whole_campaign(name):
    op, forward, policy, vjp = CORRECT_SUMS[name]
    result = _clean(op, forward, policy, vjp, f"correct.{name}", 0, None)
    assert result["cases"]["by_class"]["edges"]["run"] > 0


def test_the_exact_sums_bound_is_what_catches_the_lost_term(monkeypatch):
    """Without the input-aware bound (every element judged against gamma_n * sum|terms|) the
    exact-sums class misses the lost term 12288: its loss is far below the a-priori bound."""
    from conformance import error_models
    op, forward, policy, vjp, *_ = MUTANTS_SUMS["sum_drops_term_12288_of_long_rows"]
    with monkeypatch.context() as patch:
        patch.setattr(error_models, "exact_sums_of", lambda op: None)
        blind = campaign(capsule(op, "mutant.blind", forward, policy, vjp), seed=0, cases=1,
                         only=(EXACT_SUMS,))
    assert blind["status"] == "passed", blind["failure_reasons"]
    seen = campaign(capsule(op, "mutant.seen", forward, policy, vjp), seed=0, cases=1,
                    only=(EXACT_SUMS,))
    assert set(seen["failure_reasons"]) == {"exceeds-bound"}
    failure = seen["counterexamples"][0]["failures"][0]
    assert float(failure["bound"]) == 0.0 and float(failure["error"]) > 0.0
