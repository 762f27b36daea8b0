"""The derived bounds of layer_norm, batch_norm and scaled_dot_product_attention (conformance/families/normalization.py and attention.py)
judge float32 kernels: a straightforward float32 implementation (two-pass statistics, hard-masked
softmax) passes them, forward and VJP, over several seeds; a one-pass variance (E[x^2] - mu^2) and an
attention that masks with a finite -1000 sentinel are flagged."""
import warnings

import numpy as np
import pytest

from conformance import generators
from conformance.campaign import Settings, check_case, run_campaign
from conformance.fingerprint import harness_digest
from engine.capsule import KernelHandler, standard_capsule
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32 = np.float32
ANY_ORDER = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                            Contraction.implementation_defined, Reduction.implementation_defined)


# --- float32 kernels, written as a CUDA kernel would evaluate them (NumPy float32 throughout) ------

def _groups(op, x):
    """x as [G, n] groups, each element's parameter index, and the way back."""
    if op is Op.layer_norm:
        d = x.shape[-1]
        rows = x.reshape(int(np.prod(x.shape[:-1])), d)
        return rows, np.broadcast_to(np.arange(d), rows.shape), lambda r: r.reshape(x.shape)
    moved = np.moveaxis(x, 1, 0)
    rows = moved.reshape(moved.shape[0], int(np.prod(moved.shape[1:])))
    labels = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)
    return rows, labels, lambda r: np.moveaxis(r.reshape(moved.shape), 0, 1)


def _stats(rows, eps, one_pass=False):
    n = rows.shape[1]
    mu = rows.sum(axis=1, keepdims=True, dtype=F32) / F32(max(n, 1))
    if one_pass:   # the planted bug: E[x^2] - mu^2 cancels catastrophically
        v = np.maximum((rows * rows).sum(axis=1, keepdims=True, dtype=F32) / F32(max(n, 1))
                       - mu * mu, F32(0))
    else:
        dev = rows - mu
        v = (dev * dev).sum(axis=1, keepdims=True, dtype=F32) / F32(max(n, 1))
    r = F32(1) / np.sqrt(v + F32(eps))
    return (rows - mu) * r, r


def _norm_forward(op, one_pass=False):
    def forward(x, gamma, beta, eps=1e-5):
        with np.errstate(all="ignore"):
            rows, labels, back = _groups(op, x)
            xhat, _ = _stats(rows, eps, one_pass)
            return back(xhat * gamma[labels] + beta[labels]).astype(F32)
    return forward


def _norm_vjp(op):
    def vjp(inputs, out, g, eps=1e-5):
        x, gamma, _ = inputs
        with np.errstate(all="ignore"):
            rows, labels, back = _groups(op, x)
            gr, _, _ = _groups(op, g)
            xhat, r = _stats(rows, eps)
            n = F32(max(rows.shape[1], 1))
            h = gr * gamma[labels]
            a = h.sum(axis=1, keepdims=True, dtype=F32) / n
            b = (h * xhat).sum(axis=1, keepdims=True, dtype=F32) / n
            dx = r * (h - a - xhat * b)
            gx = gr * xhat
            if op is Op.layer_norm:
                dgamma, dbeta = gx.sum(axis=0, dtype=F32), gr.sum(axis=0, dtype=F32)
            else:
                dgamma, dbeta = gx.sum(axis=1, dtype=F32), gr.sum(axis=1, dtype=F32)
            return back(dx).astype(F32), dgamma.astype(F32), dbeta.astype(F32)
    return vjp


def _probs(q, k, mask, scale, sentinel=None):
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * F32(scale)
    allowed = np.ones(s.shape, bool) if mask is None else np.asarray(mask, bool)
    if sentinel is not None:   # the planted bug: a finite "minus infinity"
        s = np.where(allowed, s, F32(sentinel))
        e = np.exp(s - s.max(axis=-1, keepdims=True, initial=-np.inf))
        return e / e.sum(axis=-1, keepdims=True)
    masked = np.where(allowed, s, F32(-np.inf))
    m = masked.max(axis=-1, keepdims=True, initial=-np.inf)
    blocked_row = ~allowed.any(axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(masked - np.where(blocked_row, F32(0), m)), F32(0))
    total = e.sum(axis=-1, keepdims=True, dtype=F32)
    return np.where(blocked_row, F32(0), e / np.where(blocked_row, F32(1), total))


def _masked_sum(weights, data, allowed, over):
    """sum over keys (over="keys": [.., i, c] = sum_j w_ij data_jc) or over queries ("queries":
    [.., j, c] = sum_i w_ij data_ic) of the float32 products, blocked terms skipped: hard-mask
    semantics, a blocked entry's data (even inf or NaN) takes no part (as a kernel looping over
    participants does; a matmul would turn 0 * inf into NaN)."""
    if over == "keys":
        t = weights[..., :, :, None] * data[..., None, :, :]
        return np.where(allowed[..., None], t, F32(0)).sum(axis=-2, dtype=F32)
    t = weights[..., :, :, None] * data[..., :, None, :]
    return np.where(allowed[..., None], t, F32(0)).sum(axis=-3, dtype=F32)


def _allowed(q, k, mask):
    shape = q.shape[:-1] + (k.shape[-2],)
    return np.ones(shape, bool) if mask is None else np.asarray(mask, bool)


def _sdpa_forward(sentinel=None):
    def forward(q, k, v, mask=None, scale=1.0):
        with np.errstate(all="ignore"):
            p = _probs(q, k, mask, scale, sentinel)
            allowed = np.ones(p.shape, bool) if sentinel is not None else _allowed(q, k, mask)
            return _masked_sum(p, v, allowed, "keys").astype(F32)
    return forward


def sdpa_vjp(inputs, out, g, mask=None, scale=1.0):
    q, k, v = inputs
    allowed = _allowed(q, k, mask)
    with np.errstate(all="ignore"):
        p = _probs(q, k, mask, scale)
        dp = np.matmul(g, np.swapaxes(v, -1, -2))
        c = np.where(allowed, dp * p, F32(0)).sum(axis=-1, keepdims=True, dtype=F32)
        ds = np.where(allowed, p * (dp - c), F32(0))
        sc = F32(scale)
        return ((_masked_sum(ds, k, allowed, "keys") * sc).astype(F32),
                (_masked_sum(ds, q, allowed, "queries") * sc).astype(F32),
                _masked_sum(p, g, allowed, "queries").astype(F32))


def capsule(op, name, forward, vjp=None):
    cap = standard_capsule(op, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.backend_vjp if vjp else VJPMode.torchlean_tape,
                           policy=ANY_ORDER, source_file="tests/test_derived_norm_attention.py",
                           name=name)
    return cap, KernelHandler(name, op, Provider.custom_chip, Device.cpu, forward, vjp)


def campaign(cap_handler, seed, cases=2, classes=None):
    cap, handler = cap_handler
    settings = Settings(cases=cases, seed=seed, identity_cases=0, counterexamples=1,
                        harness=harness_digest())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if classes is None:
            return run_campaign(cap, handler, settings)
        failures = set()
        for cls in classes:
            for i in range(generators.class_size(cap.op, cls, cases)):
                case = generators.draw_case(cap.op, seed, cls, i)
                res = check_case(cap, handler, case, {}, repeat=False)
                failures |= res.reasons()
        return {"status": "failed" if failures else "passed", "failure_reasons": failures}


CORRECT = {
    "layer_norm": (Op.layer_norm, _norm_forward(Op.layer_norm), _norm_vjp(Op.layer_norm)),
    "batch_norm": (Op.batch_norm, _norm_forward(Op.batch_norm), _norm_vjp(Op.batch_norm)),
    "attention": (Op.scaled_dot_product_attention, _sdpa_forward(), sdpa_vjp),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_a_float32_kernel_passes_the_derived_bounds(name, seed):
    op, forward, vjp = CORRECT[name]
    result = campaign(capsule(op, f"f32.{name}", forward, vjp), seed)
    assert result["status"] == "passed", (result["failure_reasons"],
                                          result["counterexamples"][:1])
    assert result["vjp_checked"] and result["cases"]["total"] > 0
    assert result["error_model"]["forward"]["composite"]["kind"] == "derived"
    assert 0 < result["stats"]["forward"]["worst_ratio"] <= 1
    assert 0 < result["stats"]["vjp"]["worst_ratio"] <= 1


@pytest.mark.parametrize("op", [Op.layer_norm, Op.batch_norm])
def test_a_one_pass_variance_is_flagged(op):
    bug = capsule(op, f"mutant.one_pass_{op.label}", _norm_forward(op, one_pass=True))
    result = campaign(bug, 0, cases=3, classes=("cancellation", "normal"))
    assert result["status"] == "failed"
    assert result["failure_reasons"] == {"exceeds-bound"}


def test_a_finite_mask_sentinel_is_flagged():
    bug = capsule(Op.scaled_dot_product_attention, "mutant.sentinel_attention",
                  _sdpa_forward(sentinel=-1000.0))
    result = campaign(bug, 0, cases=8, classes=("masks", "edges"))
    assert result["status"] == "failed"
    assert result["failure_reasons"] == {"exceeds-bound"}


def test_a_failing_norm_or_attention_case_shrinks_to_its_group():
    from conformance.shrink import shrink
    x = np.array([[1.0, 2.0, 3.0], [4096.0, 4096.5, 4095.5]], F32)
    case = generators.Case(Op.layer_norm, "cancellation", (x, np.ones(3, F32), np.zeros(3, F32)),
                           {"eps": 1e-5})
    cap, handler = capsule(Op.layer_norm, "mutant.one_pass", _norm_forward(Op.layer_norm, True))

    def still_fails(c):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return check_case(cap, handler, c, {}, repeat=False).failures or None
    assert still_fails(case)
    small = shrink(case, still_fails, budget=8)
    assert small.inputs[0].shape == (3,) and small.inputs[0][0] == F32(4096.0)

    q = np.zeros((2, 3, 1), F32)
    mask = np.array([[[True, True], [False, False], [True, False]]] * 2)
    case = generators.Case(Op.scaled_dot_product_attention, "masks",
                           (q, np.ones((2, 2, 1), F32), np.arange(8, dtype=F32).reshape(2, 2, 2)),
                           {"mask": mask, "scale": 1.0})
    cap, handler = capsule(Op.scaled_dot_product_attention, "mutant.sentinel",
                           _sdpa_forward(sentinel=-1000.0))

    def still_fails_att(c):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return check_case(cap, handler, c, {}, repeat=False).failures or None
    small = shrink(case, still_fails_att, budget=4)
    assert small.inputs[0].shape == (1, 1, 1) and not small.params["mask"].any()
