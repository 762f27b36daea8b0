"""Peer rules: a peer's value for the elements a convention governs, as conformance/peers/
contract.Convention's `rule(case) -> (governed, value)`, in float32 NumPy on the kernel's own
forward output. Shared by the peers' contracts (torch_contract.py, jax_contract.py,
cupy_contract.py), each of which says whose rule it is and where that is written. A rule that
admits more than one value returns them as a tuple (contract.admissible)."""
from __future__ import annotations

import numpy as np

from conformance.peers.contract import ConventionCase

F32 = np.float32


def read(case: ConventionCase, i: int) -> np.ndarray:
    """Input i as the peer reads it: a subnormal as a zero of its sign where the peer's policy
    flushes (DAZ)."""
    return daz(case, case.inputs[i])


def daz(case: ConventionCase, x) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    if not case.daz:
        return x
    tiny = np.abs(x) < np.finfo(F32).tiny
    return np.where(tiny & (x != 0), np.copysign(F32(0), x), x).astype(F32)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=F32)


def _all(case: ConventionCase, value) -> tuple[np.ndarray, np.ndarray]:
    value = _f32(value)
    return np.ones(value.shape, dtype=bool), value


def _same_shape(case: ConventionCase) -> bool:
    a, b = case.inputs[0], case.inputs[1]
    return a.shape == b.shape == case.out.shape


def relu_grad_passes_nan(case):
    # threshold_backward(grad, result, 0): result <= 0 ? 0 : g, and NaN <= 0 is false
    with np.errstate(invalid="ignore"):
        value = np.where(_f32(case.out) <= 0, F32(0), _f32(case.g))
    return np.isnan(_f32(case.inputs[0])), _f32(value)


def abs_grad_sgn(case):
    x = _f32(case.inputs[0])
    sign = (x > 0).astype(F32) - (x < 0).astype(F32)    # g * sgn(x), and sgn(NaN) is 0
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isnan(x), _f32(_f32(case.g) * sign)


def minmax_grad(lose_first, governs):
    """maximum's derivatives.yaml rule: where(a == b, g/2, g), 0 for the operand that loses
    (`lose_first(a, b)`: the first operand loses); `governs(a, b)` picks the clause's elements."""
    def rule(case):
        if not _same_shape(case):   # a broadcast operand's gradient is a sum: not this rule
            return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
        a, b, g = _f32(case.inputs[0]), _f32(case.inputs[1]), _f32(case.g)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            half = np.where(a == b, g / F32(2), g)
            loses = lose_first(a, b) if case.grad == 0 else lose_first(b, a)
            value = np.where(loses, F32(0), half)
            return governs(a, b), _f32(value)
    return rule


def a_nan(a, b):
    return np.isnan(a) | np.isnan(b)


def a_tie(a, b):
    return a == b


def tie_second_operand(case):
    if not _same_shape(case):
        return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
    a, b = _f32(case.inputs[0]), _f32(case.inputs[1])
    return a == b, b


def _pt_max(a, b):
    with np.errstate(invalid="ignore"):
        return _f32(np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(a > b, a, b)))


def _pt_min(a, b):
    with np.errstate(invalid="ignore"):
        return _f32(np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(a < b, a, b)))


def _bounds(case):
    return F32(case.params["lo"]), F32(case.params["hi"])


def clamp_ties(case):
    x = _f32(case.inputs[0])
    lo, hi = _bounds(case)
    return (x == lo) | (x == hi), _pt_min(_pt_max(x, lo), hi)


def clamp_grad_inclusive(case):
    x = _f32(case.inputs[0])
    lo, hi = _bounds(case)
    with np.errstate(invalid="ignore"):
        return _all(case, np.where((x >= lo) & (x <= hi), _f32(case.g), F32(0)))


def exp_grad_from_output(case):
    with np.errstate(invalid="ignore", over="ignore"):
        return _all(case, _f32(case.g) * _f32(case.out))


def inv_grad_from_output(case):
    out = _f32(case.out)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        return _all(case, -_f32(case.g) * (out * out))


def mse_grad_float32(case):
    a, b = _f32(case.inputs[0]), _f32(case.inputs[1])
    if a.shape != b.shape or a.size == 0:
        return np.zeros(a.shape, dtype=bool), a
    alpha = F32(2.0 / a.size)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        d = (alpha * (a - b)) * _f32(case.g)
    return _all(case, d if case.grad == 0 else -d)


def mean_grad_reciprocal(case):
    x = _f32(case.inputs[0])
    axes = case.params.get("axes")
    axes = tuple(range(x.ndim)) if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if not axes or n == 0:
        return np.zeros(x.shape, dtype=bool), x
    g = _f32(case.g)
    if not case.params.get("keepdims", False):
        g = np.expand_dims(g, tuple(sorted(axes)))
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        value = np.broadcast_to(g, x.shape) * F32(1.0 / F32(n))
    return _all(case, value)


# --- JAX's own (jax/_src/lax/lax.py's JVP rules) ------------------------------------------------

def abs_grad_select(case):
    """abs's JVP select(x >= 0, g, -g): g at 0, -g at NaN (where TorchLean gives 0 and NaN).
    The negation is evaluated as 0 - g (so a zero g gives +0 there), as XLA's CPU code does."""
    x = read(case, 0)
    g = _f32(case.g)
    with np.errstate(invalid="ignore"):
        value = np.where(x >= 0, g, F32(0) - g)
    return (x == 0) | np.isnan(x), _f32(value)


def inv_grad_integer_pow(case):
    """reciprocal as integer_pow(x, -1): its JVP g * -1 * integer_pow(x, -2) = g * -(1 / (x x)),
    the square flushed where the peer flushes (an x near 1e-19 gives infinity there)."""
    x = read(case, 0)
    with np.errstate(all="ignore"):
        return _all(case, _f32(case.g) * (-(F32(1) / daz(case, x * x))))


def scale_daz_alpha(case):
    """alpha * a with a subnormal alpha read as zero (DAZ applies to the scalar too): JAX's on the
    CPU, and CuPy's (-ftz=true flushes the kernel's scalar argument as it does an array's)."""
    alpha = daz(case, np.float32(case.params["alpha"]))
    tiny = np.abs(np.float32(case.params["alpha"])) < np.finfo(F32).tiny
    x = read(case, 0)
    with np.errstate(all="ignore"):
        return np.full(x.shape, bool(tiny)), _f32(x * alpha)


def clamp_grad_halved_ties(case):
    """clip as min(max(x, lo), hi), each tie splitting g in halves: g/2 at a bound, g/4 where
    lo = hi = x, g strictly inside, 0 outside."""
    x = read(case, 0)
    lo, hi = _bounds(case)
    g = _f32(case.g)
    with np.errstate(invalid="ignore"):
        inside = (x >= lo) & (x <= hi)
        value = np.where(inside, g, F32(0)) * np.where(x == lo, F32(0.5), F32(1)) * \
            np.where(x == hi, F32(0.5), F32(1))
    return (x == lo) | (x == hi), _f32(value)


def sqrt_grad_half_over_output(case):
    """sqrt's JVP g * (0.5 / ans) in float32: two roundings where TorchLean's g / (2 sqrt(a))
    is one."""
    with np.errstate(all="ignore"):
        return _all(case, _f32(case.g) * (F32(0.5) / _f32(case.out)))


def minmax_grad_nan_to_neither(case):
    """max/min's JVP selects by comparison: where an operand is NaN no comparison holds and
    both gradients are 0."""
    if not _same_shape(case):
        return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
    a, b = _f32(case.inputs[0]), _f32(case.inputs[1])
    return a_nan(a, b), _f32(_f32(case.g) * F32(0))     # g * 0: the zero has g's sign


def nan_input_nan_grad(case):
    """The gradient NaN where the input is NaN (the chain rule through a NaN)."""
    x = _f32(case.inputs[0])
    return np.isnan(x), np.full(x.shape, np.nan, dtype=F32)



# --- CuPy's own (its kernels' source, compiled by NVRTC with -ftz=true) -------------------------

def _subnormal(x) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    return (np.abs(x) < np.finfo(F32).tiny) & (x != 0)


def zero_tie_either_sign(constant=None):
    """max(a, b) / min(a, b) of two zeros of different sign (subnormals read as zero where the
    peer flushes): +0 and -0 are both the peer's value. CuPy's float kernel is CUDA's fmaxf /
    fminf after its NaN test, and neither CUDA nor IEEE 754-2008's maxNum fixes the sign of a zero
    tie. `constant`: the second operand where it is a scalar (relu as maximum(a, 0))."""
    def rule(case):
        if constant is None and not _same_shape(case):
            return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
        a = read(case, 0)
        b = read(case, 1) if constant is None else F32(constant)
        with np.errstate(invalid="ignore"):
            tie = (a == 0) & (b == 0)
        tie = np.broadcast_to(tie, np.shape(case.out))
        shape = tie.shape
        return tie, (np.zeros(shape, F32), np.full(shape, -0.0, F32))
    return rule


def clip_compares_flushed(case):
    """CuPy's clip kernel, `lo > hi ? hi : (x < lo ? lo : (x > hi ? hi : x))` (cupy/_core/
    _routines_math.pyx, _clip), its comparisons reading subnormals as zero (-ftz=true) while the
    value it selects keeps its bits: clip(-1e-40, 0, 1) is -1e-40 where TorchLean's min(max(a, lo),
    hi) gives +0. Governs the elements a subnormal x, lo or hi takes part in."""
    x = _f32(case.inputs[0])
    lo, hi = _bounds(case)
    rx, rlo, rhi = daz(case, x), daz(case, lo), daz(case, hi)
    with np.errstate(invalid="ignore"):
        value = np.where(rlo > rhi, hi, np.where(rx < rlo, lo, np.where(rx > rhi, hi, x)))
    governed = _subnormal(x) | bool(_subnormal(lo)) | bool(_subnormal(hi))
    return np.broadcast_to(governed, x.shape), _f32(value)


def log_softmax_shift_zero_at_nonfinite_max(case):
    """CuPy's log_softmax (cupyx/scipy/special/_logsoftmax.py, as SciPy's) shifts a row by its
    max but by 0 where that max is not finite: a row holding +inf (and no NaN) is x - log(sum
    exp(x)) = x - inf, so -inf at its finite and -inf entries and NaN at the +inf ones, where
    TorchLean's a - max - log(sum exp(a - max)) is NaN throughout (inf - inf)."""
    x = _f32(case.inputs[0])
    if x.ndim == 0 or x.size == 0:
        return np.zeros(x.shape, dtype=bool), x
    axis = int(case.params.get("axis", -1)) % x.ndim
    row = np.any(np.isposinf(x), axis=axis, keepdims=True) & \
        ~np.any(np.isnan(x), axis=axis, keepdims=True)
    value = np.where(np.isposinf(x), F32(np.nan), F32(-np.inf))
    return np.broadcast_to(row, x.shape), _f32(value)
