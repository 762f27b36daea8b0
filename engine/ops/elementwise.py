"""Elementwise arithmetic and activations: wrappers and their local VJP rules, side by side."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ParameterValueError, ShapeError
from engine.ops import _checks
from engine.ops import _tape_cuda as tape
from engine.ops._dispatch import apply, local_vjp
from engine.ops._public import named_not_a_tensor
from engine.ops._tape_cuda import on_device
from engine.ops._xp import f32, xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _same_shape(op: Op, a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ShapeError(
            f"{op.label}: operand shapes {a.shape} and {b.shape} differ; elementwise ops take "
            "equal shapes, so broadcast first (engine.ops.broadcast, or use the + - * operators)")


# The wrappers below are the per-op hot path: each converts a non-Tensor argument's error into
# NotATensorError itself (engine/ops/_public.py) instead of through tensor_checked's extra frame.

def _binary(op: Op):
    def wrapper(a: Tensor, b: Tensor) -> Tensor:
        try:
            if a.shape != b.shape:   # _same_shape's test, written out
                _same_shape(op, a, b)
            return apply(op, (a, b), a.shape)
        except (AttributeError, TypeError):
            named = named_not_a_tensor(wrapper, (a, b))
            if named is None:
                raise
            raise named from None
    wrapper.__name__ = op.label
    wrapper.__doc__ = f"`{op.label}` of two tensors of equal shape (docs/OPS.md)."
    wrapper.checks_tensors = True
    return wrapper


def _unary(op: Op):
    def wrapper(a: Tensor) -> Tensor:
        try:
            return apply(op, (a,), a.shape)
        except (AttributeError, TypeError):
            named = named_not_a_tensor(wrapper, (a,))
            if named is None:
                raise
            raise named from None
    wrapper.__name__ = op.label
    wrapper.__doc__ = f"`{op.label}` of each element (docs/OPS.md)."
    wrapper.checks_tensors = True
    return wrapper


add, sub, mul = _binary(Op.add), _binary(Op.sub), _binary(Op.mul)
maximum, minimum = _binary(Op.max), _binary(Op.min)
abs_, sqrt, relu, gelu = _unary(Op.abs), _unary(Op.sqrt), _unary(Op.relu), _unary(Op.gelu)
sigmoid, tanh, softplus = _unary(Op.sigmoid), _unary(Op.tanh), _unary(Op.softplus)
exp, log, sin, cos, inv = (_unary(Op.exp), _unary(Op.log), _unary(Op.sin), _unary(Op.cos),
                           _unary(Op.inv))


def _finite_number(op: Op, name: str, value) -> float:
    x = _checks.number(op.label, name, value)
    if math.isnan(x):
        raise ParameterValueError(f"{op.label}: {name} must be a number, got NaN")
    return x


def scale(a: Tensor, alpha: float) -> Tensor:
    return apply(Op.scale, (a,), a.shape, {"alpha": _finite_number(Op.scale, "alpha", alpha)})


def clamp(a: Tensor, lo: float, hi: float) -> Tensor:
    lo, hi = _finite_number(Op.clamp, "lo", lo), _finite_number(Op.clamp, "hi", hi)
    if lo > hi:
        raise ParameterValueError(f"clamp: lo={lo} is above hi={hi}; pass lo <= hi")
    return apply(Op.clamp, (a,), a.shape, {"lo": lo, "hi": hi})


def safe_log(a: Tensor, eps: float = 1e-12) -> Tensor:
    eps = _finite_number(Op.safe_log, "eps", eps)
    if not eps > 0:
        raise ParameterValueError(f"safe_log: eps must be positive, got {eps}")
    return apply(Op.safe_log, (a,), a.shape, {"eps": eps})


# --- local VJP rules: (inputs, output, grad_out, **params) -> one gradient per input ----------
# On CuPy arrays each rule runs its kernel of engine/csrc/cuda/tape.cu (named in the comment
# beside the call), which evaluates the NumPy line below it operation for operation with our
# compile flags: CuPy's own ufuncs flush subnormals (-ftz=true). tests/test_tape_cuda.py checks
# that the two agree.

@local_vjp(Op.add)
@saves()
def _add_vjp(inputs, out, g):
    return g, g     # no arithmetic: nothing to flush


@local_vjp(Op.sub, tape=("tl_tape_neg",))
@saves()
def _sub_vjp(inputs, out, g):
    if on_device(g):
        return g, tape.of_g("tl_tape_neg", g)                      # -g: the sign bit flipped
    return g, -g


@local_vjp(Op.mul, tape=("tl_tape_mul",))
@saves(0, 1)
def _mul_vjp(inputs, out, g):
    a, b = inputs
    if on_device(g):
        return tape.of_abg("tl_tape_mul", a, b, g)
    return g * b, g * a


def _select_vjp(a, b, g, a_wins):
    xp = xp_of(g)
    nan_a, nan_b = xp.isnan(a), xp.isnan(b)
    tie = (a == b)
    half = g * f32(xp, 0.5)
    zero = xp.zeros_like(g)
    ga = xp.where(tie, half, xp.where(a_wins, g, zero))
    gb = xp.where(tie, half, xp.where(a_wins, zero, g))
    # NaN propagates: the gradient goes to the NaN operand(s).
    ga = xp.where(nan_a | nan_b, xp.where(nan_a, g, zero), ga)
    gb = xp.where(nan_a | nan_b, xp.where(nan_b, g, zero), gb)
    return ga, gb


@local_vjp(Op.max, tape=("tl_tape_max",))
@saves(0, 1)
def _max_vjp(inputs, out, g):
    a, b = inputs
    if on_device(g):
        return tape.of_abg("tl_tape_max", a, b, g)                 # _select_vjp with a > b
    return _select_vjp(a, b, g, a > b)


@local_vjp(Op.min, tape=("tl_tape_min",))
@saves(0, 1)
def _min_vjp(inputs, out, g):
    a, b = inputs
    if on_device(g):
        return tape.of_abg("tl_tape_min", a, b, g)                 # _select_vjp with a < b
    return _select_vjp(a, b, g, a < b)


@local_vjp(Op.scale, tape=("tl_tape_scale",))
@saves()
def _scale_vjp(inputs, out, g, alpha):
    if on_device(g):
        return (tape.of_g("tl_tape_scale", g, alpha),)
    return (g * f32(xp_of(g), alpha),)


@local_vjp(Op.abs, tape=("tl_tape_abs",))
@saves(0)
def _abs_vjp(inputs, out, g):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_abs", a, g),)
    return (g * xp_of(g).sign(a).astype(g.dtype),)


@local_vjp(Op.sqrt, tape=("tl_tape_sqrt",))
@saves(output=True)
def _sqrt_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_sqrt", out, g),)
    return (g / (f32(xp_of(g), 2.0) * out),)


@local_vjp(Op.clamp, tape=("tl_tape_clamp",))
@saves(0)
def _clamp_vjp(inputs, out, g, lo, hi):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_clamp", a, g, lo, hi),)
    xp = xp_of(g)
    inside = (a > f32(xp, lo)) & (a < f32(xp, hi))
    return (xp.where(inside, g, xp.zeros_like(g)),)


@local_vjp(Op.relu, tape=("tl_tape_relu",))
@saves(0)
def _relu_vjp(inputs, out, g):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_relu", a, g),)      # the input is compared: a subnormal keeps g
    xp = xp_of(g)
    return (xp.where(a > 0, g, xp.zeros_like(g)),)


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu_slope(x, t):
    """d/da gelu(a), from x = float64(a) and t = tanh(u): the rule's float64 formula (tape.cu's
    TapeGelu repeats it); tests/test_tape_cuda.py evaluates it with the device's tanh."""
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * x * x)


@local_vjp(Op.gelu, tape=("tl_tape_gelu",))
@saves(0)
def _gelu_vjp(inputs, out, g):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_gelu", a, g),)
    xp = xp_of(g)
    x = a.astype(xp.float64)
    u = _GELU_C * (x + 0.044715 * x ** 3)
    t = xp.tanh(u)
    with np.errstate(invalid="ignore", over="ignore"):   # inf * 0 at the infinities, fixed below
        d = gelu_slope(x, t)
    d = xp.where(xp.isneginf(x), -0.0, xp.where(xp.isposinf(x), 1.0, d))   # the limits
    return ((g.astype(xp.float64) * d).astype(xp.float32),)


@local_vjp(Op.sigmoid, tape=("tl_tape_sigmoid",))
@saves(output=True)
def _sigmoid_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_sigmoid", out, g),)
    return (g * out * (f32(xp_of(g), 1.0) - out),)


@local_vjp(Op.tanh, tape=("tl_tape_tanh",))
@saves(output=True)
def _tanh_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_tanh", out, g),)
    return (g * (f32(xp_of(g), 1.0) - out * out),)


@local_vjp(Op.softplus, tape=("tl_tape_softplus",))
@saves(0)
def _softplus_vjp(inputs, out, g):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_softplus", a, g),)
    xp = xp_of(g)
    s = 1.0 / (1.0 + xp.exp(-a.astype(xp.float64)))
    return ((g.astype(xp.float64) * s).astype(xp.float32),)


@local_vjp(Op.exp, tape=("tl_tape_exp",))
@saves(0)
def _exp_vjp(inputs, out, g):
    # g * exp(a) in float64: the float32 forward may overflow where the gradient does not.
    # A zero cotangent times the finite exp(a) of a finite a is an exact zero of g's sign, even
    # where float64 overflows; at a = +inf or NaN the product is NaN.
    if on_device(g):
        return (tape.of_xg("tl_tape_exp", inputs[0], g),)
    xp = xp_of(g)
    g64, a64 = g.astype(xp.float64), inputs[0].astype(xp.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = xp.where((g64 == 0) & (a64 < xp.inf), g64, g64 * xp.exp(a64))
    return (d.astype(xp.float32),)


@local_vjp(Op.log, tape=("tl_tape_log",))
@saves(0)
def _log_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_log", inputs[0], g),)
    return (g / inputs[0],)


@local_vjp(Op.sin, tape=("tl_tape_sin",))
@saves(0)
def _sin_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_sin", inputs[0], g),)
    xp = xp_of(g)
    return ((g.astype(xp.float64) * xp.cos(inputs[0].astype(xp.float64))).astype(xp.float32),)


@local_vjp(Op.cos, tape=("tl_tape_cos",))
@saves(0)
def _cos_vjp(inputs, out, g):
    if on_device(g):
        return (tape.of_xg("tl_tape_cos", inputs[0], g),)
    xp = xp_of(g)
    return ((-g.astype(xp.float64) * xp.sin(inputs[0].astype(xp.float64))).astype(xp.float32),)


@local_vjp(Op.inv, tape=("tl_tape_inv",))
@saves(0)
def _inv_vjp(inputs, out, g):
    # -g / a^2 in float64: a^2 of a float32 neither overflows nor underflows there, and 1/a
    # (which is infinite for subnormal a) never enters.
    if on_device(g):
        return (tape.of_xg("tl_tape_inv", inputs[0], g),)
    xp = xp_of(g)
    a64 = inputs[0].astype(xp.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return ((-(g.astype(xp.float64) / (a64 * a64))).astype(xp.float32),)


@local_vjp(Op.safe_log, tape=("tl_tape_safe_log",))
@saves(0)
def _safe_log_vjp(inputs, out, g, eps):
    (a,) = inputs
    if on_device(g):
        return (tape.of_xg("tl_tape_safe_log", a, g, eps),)
    xp = xp_of(g)
    keep = a > f32(xp, eps)
    return (xp.where(keep, g / xp.where(keep, a, f32(xp, 1.0)), xp.zeros_like(g)),)
