"""Elementwise ops and activations (engine/csrc/cuda/elementwise.cu): one forward and one backward
kernel per op, and one declaration per op, which names the kernels the handlers launch."""
from __future__ import annotations

from engine.capsule import ACCURATE
from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import BLOCK, contiguous, kernel, new_array
from engine.tape_saves import saves
from engine.types import BackendOp as Op, DeclaredBound

_FILE = "elementwise.cu"

# Every handler here launches through Kernel.launch (launch.py: the driver with parameters
# prepared once per kernel) and allocates with launch.new_array: the per-op hot path of every model.
# The signatures are the .cu entry points' parameter lists: p pointer, u unsigned, f float.


# One thread per unit of work and no cap on the grid (each thread one iteration of the kernels'
# grid-stride loops): on the H200 this ran exp, relu, add and sigmoid at 2^26 elements 6-10%
# faster than the persistent grid of 8 blocks per SM (measured side by side in one run).
def _one_pass_blocks(work: int) -> int:
    return max(1, (work + BLOCK - 1) // BLOCK)


# ceil(ceil(n / k) / BLOCK) = ceil(n / (k BLOCK)) for n >= 1: the blocks of a launch as one shift,
# written into the forward handlers (each function call is host time on every op).
_EW_SHIFT = (8 * BLOCK).bit_length() - 1    # ew_1_1 / ew_2_1: two float4 (8 floats) per thread
_EW_ROUND = (1 << _EW_SHIFT) - 1
assert 1 << _EW_SHIFT == 8 * BLOCK, "BLOCK must be a power of two"


def _ew_blocks(n: int) -> int:
    return _one_pass_blocks((n + 7) >> 3)   # ew_1_1 / ew_2_1 move two float4 per thread


def _ew3_blocks(n: int) -> int:
    return _one_pass_blocks((n + 3) >> 2)   # ew_3_2 moves one float4 of each array per thread


def _unary(fwd: str, bwd: str | None, params: tuple[str, ...] = ()):
    floats = "f" * len(params)
    kf = kernel(_FILE, fwd, "ppu" + floats)                    # (a, out, n, params...)
    kb = kernel(_FILE, bwd, "pppu" + floats) if bwd else None  # (a, g, ga, n, params...)

    def forward(a, **p):
        n = a.size
        out = new_array(a.shape, n)
        if n:   # (n + _EW_ROUND) >> _EW_SHIFT is _ew_blocks(n)
            if params:
                kf.launch((n + _EW_ROUND) >> _EW_SHIFT, a.data.ptr, out.data.ptr, n,
                          *[float(p[name]) for name in params])
            else:
                kf.launch((n + _EW_ROUND) >> _EW_SHIFT, a.data.ptr, out.data.ptr, n)
        return out

    @saves(0)
    def vjp(inputs, output_, g, **p):
        (a,) = inputs
        g = contiguous(g)
        n = a.size
        ga = new_array(a.shape, n)
        if n:
            if params:
                kb.launch(_ew_blocks(n), a.data.ptr, g.data.ptr, ga.data.ptr, n,
                          *[float(p[name]) for name in params])
            else:
                kb.launch(_ew_blocks(n), a.data.ptr, g.data.ptr, ga.data.ptr, n)
        return (ga,)

    return forward, vjp


def _binary(fwd: str):
    kf = kernel(_FILE, fwd, "pppu")   # (a, b, out, n)

    def forward(a, b):
        n = a.size
        out = new_array(a.shape, n)
        if n:   # (n + _EW_ROUND) >> _EW_SHIFT is _ew_blocks(n)
            kf.launch((n + _EW_ROUND) >> _EW_SHIFT, a.data.ptr, b.data.ptr, out.data.ptr, n)
        return out

    return forward


def _binary_vjp(bwd: str):
    kb = kernel(_FILE, bwd, "pppppu")   # (a, b, g, ga, gb, n)

    @saves(0, 1)
    def vjp(inputs, output_, g):
        a, b = inputs
        g = contiguous(g)
        n = a.size
        ga, gb = new_array(a.shape, n), new_array(a.shape, n)
        if n:
            kb.launch(_ew3_blocks(n), a.data.ptr, b.data.ptr, g.data.ptr, ga.data.ptr,
                      gb.data.ptr, n)
        return ga, gb

    return vjp


@saves()
def _add_vjp(inputs, output_, g):
    return g, g


_neg_kernel = kernel(_FILE, "tl_neg", "ppu")
_scale_kernel = kernel(_FILE, "tl_scale_fwd", "ppuf")


@saves()
def _sub_vjp(inputs, output_, g):
    g = contiguous(g)
    n = g.size
    neg = new_array(g.shape, n)
    if n:
        _neg_kernel.launch(_ew_blocks(n), g.data.ptr, neg.data.ptr, n)
    return g, neg


@saves()
def _scale_vjp(inputs, output_, g, alpha):
    g = contiguous(g)
    n = g.size
    out = new_array(g.shape, n)
    if n:
        _scale_kernel.launch(_ew_blocks(n), g.data.ptr, out.data.ptr, n, float(alpha))
    return (out,)


def _unary_decl(op: Op, fwd: str, bwd: str, params: tuple[str, ...] = (), **facts) -> KernelDecl:
    """A unary op whose handlers launch exactly the declared kernels (float params by name)."""
    forward, vjp = _unary(fwd, bwd, params)
    return KernelDecl(op, _FILE, (fwd,), (bwd,), forward, vjp, **facts)


def _binary_decl(op: Op, fwd: str, bwd: str, **facts) -> KernelDecl:
    return KernelDecl(op, _FILE, (fwd,), (bwd,), _binary(fwd), _binary_vjp(bwd), **facts)


# The activations' float64 evaluation: tl_act_fast.cuh's exp, reciprocal and log1p where the
# data usually is, libdevice's double functions in the tails; the same 1-ulp bound as before.
F64_FAST_ONCE = DeclaredBound(
    1.0, "evaluated in float64 and rounded once to float32. Where |exp argument| <= 64 (gelu: "
         "|x| <= 8): tl_act_fast.cuh's exp (n = rint(4y/ln2), 2^(n/4) from four constants, e^r "
         "by a degree-5 Chebyshev fit with fma: under 2^-41 relative), 1/(1+e) by a float "
         "reciprocal and one Newton step (2^-39.5) and softplus's log1p(e) by 2 atanh(e/(2+e)) "
         "with a degree-4 fit (2^-31.2): under 2^-31 relative before the rounding (sigmoid and "
         "gelu under 2^-37.5), the input's double and the result's rounding by integer bit "
         "operations (exact; gelu's |x| < 2^-60 as the float x/2); elsewhere libdevice's double "
         "functions (a few float64 ulps each, amplified at most |2u| <= 710 times through exp). "
         "Either way under 0.5 + 2^-7 float32 ulp of the exact value")
_FAST_VJP = ("VJP fast path for |exp argument| <= 64 (tanh: |a| <= 32, gelu: |a| <= 8): the "
             "forward's float64 exp and reciprocal (tl_act_fast.cuh), f'(a) within 2^-37.5 "
             "relative and g * f'(a) in float64 before the one rounding; libdevice's double "
             "functions beyond")
_GELU_VJP = ("gelu's VJP factor f = 1 + 2a(1-s)u' cancels near a = -0.7518: the fast path keeps "
             "it only where |f| >= 2^-8 (f, and so f'(a), within 2^-31 relative), the libdevice "
             "path takes the rest")

# The float32 activations (tl_act_f32.cuh, where each step's error is derived): the plain capsules.
F32_ACT = DeclaredBound(
    2.0, "forwards in float32 throughout (no libdevice call, no float64), derived in "
         "tl_act_f32.cuh: e^-|x| = 2^m E1 by k = rint(16y/ln2), Cody-Waite r, e^r - 1 to degree 4 and 2^(j/16) "
         "from a 16-entry hi + lo table: E1 within 0.5 ulp + 2^-27.3 relative; 1 + E split "
         "exactly, its reciprocal by rcp.approx (1 ulp) and a Newton step in fma (2^-44); "
         "softplus's log1p(E) = 2 atanh(v/2), v = E/(1+E/2) from that reciprocal, a degree-4 fit "
         "(2^-30.5). gelu: z = x (2C + 2CK x^2) in units of ln2/32 as an exact-split float pair "
         "(to 2^-33.5), k = rint, r to 2^-24.4 of a unit, e^(r ln2/32) - 1 to degree 3 (2^-29.8) "
         "and 2^(j/32)/(1 + j/32) from a 32-entry table, the scale 2^m (1 + j/32) from k's bits: "
         "E = e^-|z| within 1.06u after its one rounding; x N/(1 + E) (N = 1 or E, scaled by "
         "2^64: no subnormal intermediate) by rcp.approx and one residual correction (2^-43). "
         "Each result rounded once: before that rounding sigmoid is under 1.1 ulp (s >= E/2 for "
         "x < 0, so E's half ulp is at most one of s), softplus under 1.45 (log1p(E) >= E/2), "
         "gelu = x s(z) under 1.07u relative; under 1.95 ulp of the exact value after it (gelu "
         "1.57), within 2 ulp of the rounded reference (subnormal results: sigmoid and softplus "
         "three roundings of under 0.54 subnormal ulp, gelu one). PyTorch's kernels measured 2 "
         "(sigmoid), 2 (softplus) and 862 ulp (gelu, tanh form) on the same inputs")
_F32_NOTE = ("the plain capsule's forward is the float32 kernel (tl_act_f32.cuh); the accurate "
             "variant native_cuda.{op}.accurate keeps the float64 one, rounded once, within 1 ulp")
_F32_GELU_VJP = ("VJP in float32 (tl_act_f32.cuh): g s (1 + x z' (1 - s)) with s and 1 - s from "
                 "the forward's E = e^-|z| (no float64) and a reciprocal pair, each within "
                 "2.07u; on [-1, -0.625], where 1 + x z' (1 - s) "
                 "cancels, (x - x0) q(x) through the factor's root (a degree-7 float polynomial); "
                 "judged by its own derived rule (conformance/families/elementwise.py: relative on that "
                 "interval); the accurate variant keeps the float64 VJP")


def _f32_summary(op: Op, vjp: str) -> str:
    return (f"fast float32 forward, within 2 ulp ({vjp}); the accurate variant "
            f"native_cuda.{op.label}.accurate evaluates in float64 within 1 ulp")


def _accurate_summary(op: Op) -> str:
    return (f"accurate variant: evaluated in float64 and rounded once, within 1 ulp, forward "
            f"and VJP (the plain native_cuda.{op.label} is the fast float32 one)")


def _act_pair(op: Op, f32: str, f64: str, bwd: str, f32_bwd: str | None, notes: tuple):
    """The plain capsule (the float32 forward; its VJP f32_bwd, or the float64 bwd) and the
    accurate variant (today's float64 kernels)."""
    fast_bwd = f32_bwd or bwd
    vjp = ("float32 VJP" if f32_bwd else "float64 VJP rounded once")
    fast_notes = (_F32_NOTE.format(op=op.label),) + ((_F32_GELU_VJP,) if f32_bwd else notes)
    return (_unary_decl(op, f32, fast_bwd, bound=F32_ACT, f64_vjp=f32_bwd is None,
                        summary=_f32_summary(op, vjp), notes=fast_notes),
            _unary_decl(op, f64, bwd, bound=F64_FAST_ONCE, f64_vjp=True,
                        summary=_accurate_summary(op), notes=notes, variant=ACCURATE))


# libdevice=(function, ulps): the forward's error is that single-precision function's, as the
# CUDA C++ Programming Guide tabulates it. f64_vjp: tl_*_bwd evaluates g * f'(a) in float64 from
# the input and rounds once.
DECLS = (
    _unary_decl(Op.abs, "tl_abs_fwd", "tl_abs_bwd", exact=True),
    _unary_decl(Op.sqrt, "tl_sqrt_fwd", "tl_sqrt_bwd", f64_vjp=True,
                notes=("VJP for normal a: float 1/sqrt(a) correctly rounded and one Newton step "
                       "in double (under 2^-46.5 relative); IEEE double division otherwise",),
                summary="sqrtf under --prec-sqrt=true: correctly rounded"),
    _unary_decl(Op.relu, "tl_relu_fwd", "tl_relu_bwd", exact=True),
    _unary_decl(Op.inv, "tl_inv_fwd", "tl_inv_bwd", f64_vjp=True,
                notes=("VJP for 2^-126 <= |a| <= 2^126: float 1/a correctly rounded and one Newton "
                       "step in double, squared (under 2^-44.8 relative); IEEE double division "
                       "otherwise",),
                summary="1.0f / a under --prec-div=true: correctly rounded"),
    _unary_decl(Op.exp, "tl_exp_fwd", "tl_exp_bwd", libdevice=("expf", 2.0), f64_vjp=True,
                notes=(_FAST_VJP,)),
    _unary_decl(Op.log, "tl_log_fwd", "tl_log_bwd", libdevice=("logf", 1.0), f64_vjp=True),
    _unary_decl(Op.sin, "tl_sin_fwd", "tl_sin_bwd", libdevice=("sinf", 2.0), f64_vjp=True),
    _unary_decl(Op.cos, "tl_cos_fwd", "tl_cos_bwd", libdevice=("cosf", 2.0), f64_vjp=True),
    _unary_decl(Op.tanh, "tl_tanh_fwd", "tl_tanh_bwd", libdevice=("tanhf", 2.0), f64_vjp=True,
                notes=(_FAST_VJP,)),
    *_act_pair(Op.sigmoid, "tl_sigmoid_f32", "tl_sigmoid_fwd", "tl_sigmoid_bwd", None,
               (_FAST_VJP,)),
    *_act_pair(Op.softplus, "tl_softplus_f32", "tl_softplus_fwd", "tl_softplus_bwd", None,
               (_FAST_VJP,)),
    *_act_pair(Op.gelu, "tl_gelu_f32", "tl_gelu_fwd", "tl_gelu_bwd", "tl_gelu_bwd_f32",
               (_FAST_VJP, _GELU_VJP)),
    _unary_decl(Op.clamp, "tl_clamp_fwd", "tl_clamp_bwd", ("lo", "hi"), exact=True),
    _unary_decl(Op.safe_log, "tl_safe_log_fwd", "tl_safe_log_bwd", ("eps",),
                libdevice=("logf", 1.0), f64_vjp=True),
    _binary_decl(Op.mul, "tl_mul_fwd", "tl_mul_bwd", summary="IEEE float32 multiplication"),
    _binary_decl(Op.max, "tl_max_fwd", "tl_max_bwd", exact=True),
    _binary_decl(Op.min, "tl_min_fwd", "tl_min_bwd", exact=True),
    # add's VJP is (g, g): no kernel, no arithmetic.
    KernelDecl(Op.add, _FILE, ("tl_add_fwd",), (), _binary("tl_add_fwd"), _add_vjp,
               summary="IEEE float32 addition (one correctly rounded operation)"),
    KernelDecl(Op.sub, _FILE, ("tl_sub_fwd",), ("tl_neg",), _binary("tl_sub_fwd"), _sub_vjp,
               summary="IEEE float32 subtraction"),
    # scale's VJP is the forward kernel again, on g.
    KernelDecl(Op.scale, _FILE, ("tl_scale_fwd",), ("tl_scale_fwd",),
               _unary("tl_scale_fwd", None, ("alpha",))[0], _scale_vjp,
               summary="alpha rounded to float32, one IEEE multiplication"),
)
