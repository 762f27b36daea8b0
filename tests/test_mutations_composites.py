"""Issue 35's classes 6 and 7 in the mutation suite: planted bugs in the small-output regimes of
composites and in masks past the first 64-row tile (tests/mutants_composites.py) must be flagged,
each for its own reason, by a whole campaign on every seed 0-2; honest alternatives must stay clean
over 10 seeds. The tables have test_mutations.py's formats, to be merged into its MUTANTS and
CORRECT (and so into scripts/mutation_table.py)."""
import pytest

import mutants_composites as C
from test_mutations import ANY_ORDER, SEEDED, assert_caught, campaign, capsule
from engine.providers.reference import F64_ONCE, F64_ONCE_CANCELLING, ROUNDED, XENT_F64
from engine.types import BackendOp as Op, RuntimeEntry as Entry


# The reasons each planted bug may also be flagged for: a zero where the exact result is a
# subnormal is a flushed subnormal; a log of an underflowed probability, or a product of an
# infinite input with 0, a special value; the engine's VJP rule of a softmax reads the capsule's
# (wrong) forward output. Every campaign is deterministic per seed: these are the reasons seeds
# 0-2 show, each for the bug's own cause.
_FLUSH = {"exceeds-bound", "flushed-subnormal"}
_SPECIAL = {"exceeds-bound", "nan-mismatch", "inf-mismatch"}
_SOFTMAX_GRADS = {"vjp-exceeds-bound", "vjp-nan-mismatch", "vjp-inf-mismatch",
                  "vjp-flushed-subnormal"}

# name: (op, forward, policy, vjp, declared, the reason it must be flagged for (or a tuple: one of
# them), the reasons allowed)
MUTANTS_COMPOSITES = {
    # class 6: small outputs of composites
    "cross_entropy_log_of_one_plus": (Entry.cross_entropy, C.xent_log_one_plus, XENT_F64, None,
                                      None, "exceeds-bound", {"exceeds-bound"}),
    "cross_entropy_logsumexp_with_the_max": (Entry.cross_entropy, C.xent_logsumexp_with_the_max,
                                             XENT_F64, None, None, "exceeds-bound",
                                             {"exceeds-bound"}),
    "softplus_log_of_one_plus_exp": (Op.softplus, C.softplus_log_one_plus_exp, ROUNDED, None,
                                     F64_ONCE, ("exceeds-bound", "flushed-subnormal"), _FLUSH),
    "sigmoid_by_reflection": (Op.sigmoid, C.sigmoid_by_reflection, ROUNDED, None, F64_ONCE,
                              ("exceeds-bound", "flushed-subnormal"), _FLUSH),
    "log_softmax_as_log_of_softmax": (Op.log_softmax, C.log_softmax_as_log_of_softmax, ROUNDED,
                                      None, F64_ONCE, ("exceeds-bound", "flushed-subnormal"),
                                      _FLUSH | {"inf-mismatch"} | _SOFTMAX_GRADS),
    "gelu_tanh_sum_in_the_negative_tail": (Op.gelu, C.gelu_tanh_sum, ROUNDED, None, F64_ONCE,
                                           ("exceeds-bound", "flushed-subnormal"), _FLUSH),
    "mse_expanded_square": (Op.mse_loss, C.mse_expanded, ANY_ORDER, None, None,
                            "exceeds-bound", _SPECIAL),
    # class 7: masks past the first tile, length-1 rows, the scale's rounding
    "attention_heads_causal_off_by_one_in_the_last_partial_tile": (
        Entry.attention_heads, C.heads_causal_off_by_one_in_the_last_partial_tile, ROUNDED, None,
        F64_ONCE_CANCELLING, "exceeds-bound", _SPECIAL),
    "attention_mask_shifted_in_the_last_partial_tile": (
        Op.scaled_dot_product_attention, C.sdpa_mask_shifted_in_the_last_partial_tile, ROUNDED,
        None, F64_ONCE_CANCELLING, "exceeds-bound", _SPECIAL),
    "masked_softmax_shifted_in_the_last_partial_tile": (
        Op.hard_masked_softmax, C.masked_softmax_shifted_in_the_last_partial_tile, ROUNDED, None,
        F64_ONCE, "exceeds-bound", _SPECIAL | {"flushed-subnormal"} | _SOFTMAX_GRADS),
    "softmax_length_one_fast_path": (Op.softmax, C.softmax_length_one_fast_path, ROUNDED, None,
                                     F64_ONCE, "nan-mismatch",
                                     {"nan-mismatch", "vjp-nan-mismatch"}),
    "attention_single_key_fast_path": (Op.scaled_dot_product_attention,
                                       C.sdpa_single_key_fast_path, ROUNDED, None,
                                       F64_ONCE_CANCELLING, "nan-mismatch", {"nan-mismatch"}),
    "attention_heads_single_key_fast_path": (Entry.attention_heads, C.heads_single_key_fast_path,
                                             ROUNDED, None, F64_ONCE_CANCELLING, "nan-mismatch",
                                             {"nan-mismatch"}),
    # an error of a fraction of an ulp at most: only the bitwise check sees it (an error bound
    # may still be passed by that fraction, rarely)
    "attention_float64_scale": (Op.scaled_dot_product_attention, C.sdpa_float64_scale, ROUNDED,
                                None, F64_ONCE_CANCELLING, "param-not-rounded",
                                {"param-not-rounded", "exceeds-bound"}),
}
# class 6's bugs: the edge set's mixed values already reach softplus's, sigmoid's and gelu's tails,
# but the seeded stream must reach every small-output regime too (the cancellation class's shaping)
SMALL_OUTPUT = ("cross_entropy_log_of_one_plus", "cross_entropy_logsumexp_with_the_max",
                "softplus_log_of_one_plus_exp", "sigmoid_by_reflection",
                "log_softmax_as_log_of_softmax", "gelu_tanh_sum_in_the_negative_tail",
                "mse_expanded_square")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(MUTANTS_COMPOSITES))
def test_planted_bug_is_flagged_for_its_reason(name, seed):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_COMPOSITES[name]
    result = campaign(capsule(op, f"mutant.{name}", forward, policy, vjp, declared), seed=seed)
    assert_caught(result, reason, allowed)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", SMALL_OUTPUT)
def test_small_output_bug_is_flagged_by_the_cancellation_class_alone(name, seed):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS_COMPOSITES[name]
    result = campaign(capsule(op, f"mutant.{name}", forward, policy, vjp, declared), seed=seed,
                      only=("cancellation",))
    assert_caught(result, reason, allowed)


# --- honest alternatives -----------------------------------------------------------------------

# name: (op, forward, policy, vjp)
CORRECT_COMPOSITES = {
    "float64_cross_entropy_summed_by_fsum": (Entry.cross_entropy, C.xent_fsum, XENT_F64, None),
    "honest_float32_log_softmax": (Op.log_softmax, C.log_softmax_f32, ANY_ORDER, None),
    "honest_float32_attention": (Op.scaled_dot_product_attention, C.sdpa_f32, ANY_ORDER, None),
    "honest_float32_attention_heads": (Entry.attention_heads, C.heads_f32, ANY_ORDER, None),
}


@pytest.mark.parametrize("name", sorted(CORRECT_COMPOSITES))
def test_honest_alternative_passes_the_edge_set(name):
    op, forward, policy, vjp = CORRECT_COMPOSITES[name]
    result = campaign(capsule(op, f"correct.{name}", forward, policy, vjp))
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"],
                                          result["counterexamples"][:1])
    assert result["cases"]["by_class"]["edges"]["run"] > 0


@pytest.mark.parametrize("seed", range(1, 10))
@pytest.mark.parametrize("name", sorted(CORRECT_COMPOSITES))
def test_honest_alternative_passes_over_ten_seeds(name, seed):
    op, forward, policy, vjp = CORRECT_COMPOSITES[name]
    result = campaign(capsule(op, f"correct.{name}", forward, policy, vjp), seed=seed,
                      only=SEEDED)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])
    assert result["cases"]["total"] > 0
