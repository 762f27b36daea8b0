"""The harness proves itself: planted-bug capsules (tests/mutants.py) must be flagged, each for its
own reason, over 3 seeds; correct capsules with other valid orders (reversed, pairwise, FMA, float64
accumulation, honest float32 softmax) must stay clean over 10 seeds. The fixed edge set is the same
for every seed, so it runs once per capsule and the seeded classes run for every seed."""
import warnings

import numpy as np
import pytest

import mutants as M
from conformance import generators
from conformance.campaign import Settings, run_campaign
from conformance.fingerprint import harness_digest
from conformance.worker import shrinker
from engine.capsule import KernelHandler, standard_capsule
from engine.providers.reference import BLAS, EXACT, F64_ONCE, ROUNDED, TREE
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32 = np.float32
ANY_ORDER = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                            Contraction.implementation_defined, Reduction.implementation_defined)
LEFT_FUSED = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                             Contraction.fused, Reduction.fixed_left)
LEFT = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                       Contraction.separate, Reduction.fixed_left)
SEEDED = ("normal", "wide", "subnormal", "signed-zero", "special", "near-overflow",
          "cancellation", "shapes", "empty", "masks", "params", "indices", "misaligned", "exact-sums")


def capsule(op, name, forward, policy, vjp=None, declared=None, device=Device.cpu):
    mode = VJPMode.backend_vjp if vjp else VJPMode.torchlean_tape
    cap = standard_capsule(op, Provider.custom_chip, device, trust=TrustLevel.fuzzed,
                           vjp_mode=mode, policy=policy, source_file="tests/mutants.py",
                           name=name, declared_bound=declared)
    return cap, KernelHandler(name, op, Provider.custom_chip, device, forward, vjp)


def settings(seed=0, cases=2) -> Settings:
    return Settings(cases=cases, seed=seed, identity_cases=1, counterexamples=1,
                    harness=harness_digest())


def campaign(cap_handler, seed=0, cases=2, only=None, shrink_dir=None):
    cap, handler = cap_handler
    s = settings(seed, cases)
    shrink_to = None if shrink_dir is None else shrinker(cap, handler, s, shrink_dir, None, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_campaign(cap, handler, s, shrink_to=shrink_to, only=only)


def assert_caught(result: dict, reason, allowed: set) -> None:
    """A planted bug is caught when its campaign failed for its reason (or one of a tuple of
    them), for no reason outside `allowed`, and without a harness error. Shared by the GPU suite
    and scripts/mutation_table.py."""
    wanted = set(reason) if isinstance(reason, tuple) else {reason}
    reasons = set(result["failure_reasons"])
    assert result["status"] == "failed", result.get("harness_errors")
    assert wanted & reasons, reasons
    assert reasons <= allowed, f"flagged for unexpected reasons: {reasons - allowed}"
    assert not result["harness_errors"], result["harness_errors"]


# name: (op, forward, policy, vjp, declared, the reason it must be flagged for (or a tuple: one of
# them), the reasons allowed)
MUTANTS = {
    "add_truncates": (Op.add, M.add_truncating, ROUNDED, None, None, "not-correctly-rounded",
                      {"not-correctly-rounded", "inf-mismatch"}),   # FLT_MAX for an overflow
    "sum_drops_last_term": (Op.reduce_sum, M.sum_dropping_last, TREE, M.sum_vjp, None,
                            "exceeds-bound", {"exceeds-bound", "order-mismatch", "inf-mismatch",
                                              "nan-mismatch", "flushed-subnormal"}),
    "matmul_float16_accumulator": (Op.matmul, M.matmul_float16, BLAS, None, None,
                                   "exceeds-bound", {"exceeds-bound", "inf-mismatch",
                                                     "nan-mismatch"}),
    "mul_flushes_subnormals": (Op.mul, M.mul_flushing, ROUNDED, None, None, "flushed-subnormal",
                               {"flushed-subnormal"}),
    "relu_negative_zero": (Op.relu, M.relu_keeping_negative_zero, EXACT, None, None,
                           "signed-zero", {"signed-zero"}),
    "masked_softmax_finite_sentinel": (Op.hard_masked_softmax, M.masked_softmax_sentinel,
                                       ROUNDED, None, F64_ONCE, "exceeds-bound",
                                       {"exceeds-bound", "nan-mismatch", "inf-mismatch",
                                        "vjp-exceeds-bound", "vjp-nan-mismatch",
                                        "vjp-inf-mismatch", "vjp-identity", "raised"}),
    "softmax_without_max": (Op.softmax, M.softmax_without_max, ANY_ORDER, None, None,
                            "nan-mismatch", {"nan-mismatch", "exceeds-bound", "inf-mismatch",
                                             "vjp-nan-mismatch", "vjp-exceeds-bound",
                                             "vjp-inf-mismatch", "flushed-subnormal",
                                             "vjp-flushed-subnormal", "vjp-identity"}),
    "sub_vjp_wrong_sign": (Op.sub, lambda a, b: np.subtract(a, b), ROUNDED, M.sub_vjp_wrong_sign,
                           None, "vjp-not-bitwise", {"vjp-not-bitwise"}),
    "broadcast_wrong_axis": (Op.broadcast, M.broadcast_wrong_axis, EXACT, None, None,
                             "not-bitwise", {"not-bitwise", "signed-zero", "nan-mismatch",
                                             "inf-mismatch"}),
    "nondeterministic_sum_claims_fixed_order": (Op.reduce_sum, M.sum_nondeterministic, TREE,
                                                M.sum_vjp, None, "not-repeatable",
                                                {"not-repeatable", "order-mismatch"}),
    # issue 20's classes: memory, axes and sizes
    "relu_writes_into_its_input": (Op.relu, M.relu_clobbering_input, EXACT, None, None,
                                   "input-mutated", {"input-mutated"}),
    "sub_vjp_negates_the_cotangent_in_place": (Op.sub, lambda a, b: np.subtract(a, b), ROUNDED,
                                               M.sub_vjp_negating_grad_in_place, None,
                                               "vjp-input-mutated", {"vjp-input-mutated"}),
    "exp_writes_only_a_prefix": (Op.exp, M.exp_prefix_only, ROUNDED, None, F64_ONCE,
                                 "poison-in-output", {"poison-in-output"}),
    "sum_mirrors_negative_axes": (Op.reduce_sum, M.sum_mirroring_negative_axes, TREE, M.sum_vjp,
                                  None, ("shape-mismatch", "exceeds-bound"),
                                  {"exceeds-bound", "shape-mismatch", "order-mismatch",
                                   "inf-mismatch", "nan-mismatch", "flushed-subnormal",
                                   "signed-zero", "not-correctly-rounded"}),
    "sum_assumes_sorted_axes": (Op.reduce_sum, M.sum_assuming_sorted_axes, TREE, M.sum_vjp,
                                None, ("shape-mismatch", "exceeds-bound"), {"shape-mismatch", "exceeds-bound",
                                                         "order-mismatch", "inf-mismatch",
                                                         "nan-mismatch"}),
    "sum_drops_the_tail_block_of_long_rows": (Op.reduce_sum, M.sum_dropping_tail_block, TREE,
                                              M.sum_vjp, None, "exceeds-bound",
                                              {"exceeds-bound", "order-mismatch",
                                               "inf-mismatch", "nan-mismatch"}),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_bug_is_flagged_for_its_reason(name, seed):
    """A whole campaign per seed: the fixed edge set (the same for every seed) and the seeded
    classes. Some bugs only the edge set can see (a prefix-only write needs more than 1024
    elements, a long-row bug more than 1024 terms), which is why every campaign runs it."""
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS[name]
    result = campaign(capsule(op, f"mutant.{name}", forward, policy, vjp, declared), seed=seed)
    assert_caught(result, reason, allowed)
    covered = {r for ce in result["counterexamples"] for r in ce["reasons"]}
    assert covered == set(result["failure_reasons"])   # one counterexample per reason at least


def test_axis_bugs_fail_exactly_on_the_cases_with_such_axes():
    for name, wants in (("sum_mirrors_negative_axes", lambda axes: any(a < 0 for a in axes)),
                        ("sum_assumes_sorted_axes",
                         lambda axes: len(axes) > 1 and list(axes) != sorted(axes))):
        op, forward, policy, vjp, *_ = MUTANTS[name]
        cap, handler = capsule(op, f"mutant.{name}", forward, policy, vjp)
        result = campaign((cap, handler))
        for ce in result["counterexamples"]:
            case = generators.draw_case(op, ce["case"]["seed"], ce["case"]["class"],
                                        ce["case"]["index"])
            axes = case.params.get("axes")
            axes = (axes,) if isinstance(axes, int) else axes
            assert axes is not None and wants(axes), (name, ce["case"])


def test_every_failure_reason_gets_a_shrunk_replayable_counterexample(tmp_path):
    cap_handler = capsule(Op.relu, "mutant.relu_two_bugs", M.relu_two_bugs, EXACT)
    result = campaign(cap_handler, shrink_dir=tmp_path)
    assert {"signed-zero", "nan-mismatch"} <= set(result["failure_reasons"])
    by_reason = {r: ce for ce in result["counterexamples"] for r in ce["reasons"]}
    for reason in ("signed-zero", "nan-mismatch"):
        ce = by_reason[reason]
        assert ce["replay_command"].startswith("torchlean-conformance replay ")
        assert reason in {f["reason"] for f in ce["shrunk_failures"]}
        assert (tmp_path / "replays").is_dir()


def test_the_case_stream_does_not_depend_on_the_capsule_name():
    op, forward, policy, *_ = MUTANTS["mul_flushes_subnormals"]
    a = campaign(capsule(op, "mutant.one_name", forward, policy))
    b = campaign(capsule(op, "other.name_entirely", forward, policy))
    assert a["failure_reasons"] == b["failure_reasons"]
    assert [ce["case"] for ce in a["counterexamples"]] == [ce["case"] for ce in b["counterexamples"]]


def test_the_campaign_records_its_size_distribution():
    result = campaign(capsule(Op.reduce_sum, "correct.tree", M.tree_reduce, TREE, M.sum_vjp))
    sizes = result["cases"]["sizes"]
    assert result["status"] == "passed", result["failure_reasons"]
    assert sizes["max_elements"] > 2 ** 20 and sizes["max_terms"] > 2 ** 20
    assert sizes["buckets"][">=1048576"] >= 1 and sizes["buckets"]["0"] >= 1
    assert result["cases"]["by_class"]["edges"]["run"] >= 15
    assert result["timing"]["elements_per_second"] > 0


# --- correct capsules with other valid orders -----------------------------------------------------

CORRECT = {
    "reversed_sum": (Op.reduce_sum, M.sum_reversed, ANY_ORDER, M.sum_vjp),
    "pairwise_sum": (Op.reduce_sum, M.sum_pairwise, ANY_ORDER, M.sum_vjp),
    "left_fold_sum_claiming_fixed_left": (Op.reduce_sum, M.sum_left, LEFT, M.sum_vjp),
    "fma_matmul_claiming_fixed_left_fused": (Op.matmul, M.matmul_fma_left, LEFT_FUSED, None),
    "float64_accumulating_matmul": (Op.matmul, M.matmul_float64, ANY_ORDER, None),
    "honest_float32_softmax": (Op.softmax, M.softmax_f32, ANY_ORDER, None),
    "honest_float32_masked_softmax": (Op.hard_masked_softmax, M.masked_softmax_f32, ANY_ORDER,
                                      None),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_alternative_orders_pass_the_edge_set(name):
    op, forward, policy, vjp = CORRECT[name]
    result = campaign(capsule(op, f"correct.{name}", forward, policy, vjp))
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"],
                                          result["counterexamples"][:1])
    assert result["cases"]["by_class"]["edges"]["run"] > 0


@pytest.mark.parametrize("seed", range(1, 10))
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_alternative_orders_pass_over_ten_seeds(name, seed):
    op, forward, policy, vjp = CORRECT[name]
    result = campaign(capsule(op, f"correct.{name}", forward, policy, vjp), seed=seed,
                      only=SEEDED)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])
    assert result["cases"]["total"] > 0
    if policy.reduction is Reduction.fixed_left:
        assert result["observed"]["fixed_order_checks"] == result["cases"]["total"]
