"""Issue 35's two harness false alarms, each reproduced on an honest capsule, and the check that
catches a kernel using an unrounded float parameter:

- 8: bias_gelu's inner-product identity ran its finite differences through s = float32(x + b) with
  one addend over 2^7 times smaller than the other, so its step was lost in the sum's rounding and
  the identity failed reference.bias_gelu itself (seed 5). Its value shaping now keeps |x| within
  2^-4 .. 2^4 of |b| in the classes the identity runs on, as add_layer_norm's does.
- 9: the derived attention bound multiplied zero weights by the infinities of rows a query does not
  read (0 * inf = NaN, cleaned to a bound of 0), so an honest finite row failed. A row's bound now
  never depends on rows it does not read.
"""
import dataclasses
import warnings

import numpy as np
import pytest

import mutants_composites as C
from test_mutations import ANY_ORDER, capsule
from conformance import error_models, generators
from conformance.campaign import PARAM_NOT_ROUNDED, Settings, check_case, float32_params, \
    run_campaign
from conformance.fingerprint import harness_digest
from conformance.generators import Case
from conformance.references import get as get_reference
from engine.registry import registry
from engine.types import BackendOp as Op, RuntimeEntry as Entry

F32 = np.float32
HEADS_FLASH = "native_cuda.attention_heads"     # the flash rule's capsule name (families/attention.py, FLASH)


# --- 8: bias_gelu's identity ------------------------------------------------------------------

@pytest.mark.parametrize("cls", ["normal", "shapes"])
def test_bias_gelu_addends_stay_within_2_to_the_4_in_the_identity_classes(cls):
    for seed in range(10):
        for index in range(8):
            x, b = generators.draw_case(Entry.bias_gelu, seed, cls, index).inputs
            ratio = np.abs(x.astype(np.float64)) / np.abs(b.astype(np.float64))
            assert np.all((ratio >= 1 / 16) & (ratio <= 16)), (seed, index, ratio.min(),
                                                               ratio.max())


def _identity_campaign(name, seed):
    """The classes the identity runs on, with the identity on every case (not only the first
    two a full campaign checks)."""
    cap, handler = registry().get(name)
    settings = Settings(cases=8, seed=seed, identity_cases=16, counterexamples=1,
                        harness=harness_digest())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_campaign(cap, handler, settings, only=("normal", "shapes"))


@pytest.mark.parametrize("seed", range(10))
def test_reference_bias_gelu_passes_its_identity_over_ten_seeds(seed):
    result = _identity_campaign("reference.bias_gelu", seed)
    assert result["status"] == "passed", (result["failure_reasons"], result["counterexamples"])
    assert result["identity"]["failed"] == 0
    assert result["identity"]["passed"] >= 8     # the identity ran, it was not skipped


def test_without_the_shaping_seed_5_fails_the_identity(monkeypatch):
    """The regression's witness: with bias_gelu's value shaping off, reference.bias_gelu fails
    the identity at seed 5 again (so the test above can fail)."""
    from conformance.families import OP_SPECS
    spec = OP_SPECS[Entry.bias_gelu]
    monkeypatch.setitem(OP_SPECS, Entry.bias_gelu, dataclasses.replace(spec, values=None))
    result = _identity_campaign("reference.bias_gelu", 5)
    assert "vjp-identity" in result["failure_reasons"], result["failure_reasons"]


# --- 9: the attention bound of a row reads that row's data only --------------------------------

def _heads_case(value, where, causal=True):
    """B 2, T 6, H 2, D 3 normals with `value` at q, k or v's last token in batch 0, head 0: the
    token no earlier query row reads under the causal mask."""
    rng = np.random.default_rng(35)
    q, k, v = (rng.standard_normal((2, 6, 6)).astype(F32) for _ in range(3))
    arrays = {"q": q, "k": k, "v": v}
    arrays[where][0, 5, 0] = F32(value)
    return (q, k, v), {"heads": 2, "causal": causal, "scale": float(F32(3 ** -0.5))}


def _bounds(name, inputs, params):
    """Forward and VJP bounds of the derived rule of capsule `name`, for a forward output equal
    to the rounded reference (a VJP rule inherits the actual output's error: an output whose bits
    moved would move the bound for its own reason)."""
    cap, _ = capsule(Entry.attention_heads, name, C.heads_f32, ANY_ORDER)
    ref = get_reference("attention_heads")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fwd = ref.forward(inputs, **params)
        out = np.asarray(fwd.value, F32)
        model = error_models.forward_model(cap, fwd.kind)
        ctx = error_models.BoundContext(Entry.attention_heads, inputs, params,
                                        cap.numerical_policy, out=out, fwd_ref=fwd)
        bounds = [error_models.bound_array(model, fwd, ctx)]
        g = np.random.default_rng(7).standard_normal(out.shape).astype(F32)
        for i, grad in enumerate(ref.vjp(inputs, g, **params)):
            vmodel = error_models.vjp_model(cap, grad.kind)
            vctx = dataclasses.replace(ctx, g=g, input_index=i)
            bounds.append(error_models.bound_array(vmodel, grad, vctx))
    return bounds


# what reads the last token of batch 0, head 0 (columns 0..2) under the causal mask: the forward
# and dq rows of that token only (dk and dv of every key sum over the queries, that one included)
_UNREAD = {"forward": (slice(0, 1), slice(0, 5), slice(0, 3)),
           "dq": (slice(0, 1), slice(0, 5), slice(0, 3))}


@pytest.mark.parametrize("rule", ["correct.composed", HEADS_FLASH])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_a_rows_bound_does_not_depend_on_rows_it_does_not_read(rule, where, value):
    """Equal to the last bit, except where a VJP rule inherits the forward's error |out - exact|:
    the reference computes the exact values of a batch entry holding a special value by the
    float64 formula (references/scaled_dot_product_attention.py), so exact moves by float64
    roundings (2^-53 relative) and such a bound by under 1e-9 of itself."""
    finite = _bounds(rule, *_heads_case(1.5, where))
    special = _bounds(rule, *_heads_case(value, where))

    def same(index, region):
        a, b = special[index][region], finite[index][region]
        return np.array_equal(a, b) if index == 0 else np.allclose(a, b, rtol=1e-9, atol=0)
    for name, index in (("forward", 0), ("dq", 1)):
        region = _UNREAD[name]
        assert same(index, region), (name, rule)
        assert np.all(np.isfinite(special[index][region]) & (special[index][region] > 1e-9))
    # batch 1 and head 1 of batch 0 read nothing of it: every output's bound there is the same
    for index in range(4):
        assert same(index, (1,)), index
        assert same(index, (0, slice(None), slice(3, None))), index


def test_an_honest_float32_attention_heads_passes_a_case_with_an_unread_infinity():
    """Issue 35's witness: an infinity in a token the finite rows do not read left them a bound
    of 4 ulps of the smallest normal (0 * inf = NaN, cleaned to 0), under their honest error."""
    cap_handler = capsule(Entry.attention_heads, "correct.heads_f32", C.heads_f32, ANY_ORDER)
    for value in (np.inf, -np.inf, np.nan):
        inputs, params = _heads_case(value, "v")
        case = Case(Entry.attention_heads, "special", inputs, params, seed=0, index=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = check_case(*cap_handler, case, {})
        assert res.harness_error is None, res.harness_error
        assert not res.failed, [f.to_json() for f in res.failures[:2]]


# --- the float parameters' rounding --------------------------------------------------------------

def test_float32_params_rounds_only_floats_off_the_float32_grid():
    params = {"scale": 0.1, "alpha": 0.5, "axis": -1, "causal": True, "mask": None,
              "eps": float(F32(1e-5)), "big": 1e39}
    rounded, names = float32_params(params)
    assert names == ["scale"] and rounded["scale"] == float(F32(0.1))
    assert {k: v for k, v in rounded.items() if k != "scale"} == \
        {k: v for k, v in params.items() if k != "scale"}


def _sdpa_case(scale):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 16, 5)).astype(F32) for _ in range(3))
    return Case(Op.scaled_dot_product_attention, "params", (q, k, v),
                {"mask": None, "scale": scale}, seed=0, index=0)


@pytest.mark.parametrize("forward,flagged", [(C.sdpa_float64_scale, True),
                                             (C.sdpa_f32, False)])
def test_a_kernel_using_the_unrounded_scale_is_flagged(forward, flagged):
    from engine.providers.reference import F64_ONCE_CANCELLING, ROUNDED
    cap_handler = capsule(Op.scaled_dot_product_attention, "mutant.scale", forward,
                          ROUNDED if flagged else ANY_ORDER,
                          declared=F64_ONCE_CANCELLING if flagged else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        off_grid = check_case(*cap_handler, _sdpa_case(3 ** -0.5), {})
        on_grid = check_case(*cap_handler, _sdpa_case(float(F32(3 ** -0.5))), {})
    assert (PARAM_NOT_ROUNDED in off_grid.reasons()) is flagged, off_grid.reasons()
    assert not on_grid.failed, on_grid.reasons()     # the same kernel, a float32 scale: clean


def test_the_params_class_draws_scales_off_the_float32_grid():
    for op in (Op.scaled_dot_product_attention, Entry.attention_heads):
        scales = [generators.draw_case(op, seed, "params", i).params["scale"]
                  for seed in range(4) for i in range(4)]
        assert any(float(F32(s)) != s for s in scales)
        assert all(isinstance(s, float) for s in scales)
