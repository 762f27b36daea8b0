"""Elementwise ops and activations (engine/csrc/cuda/elementwise.cu): one forward and one backward
kernel per op; the handler table of this family."""
from __future__ import annotations

from engine.providers.native_cuda.launch import F32, U32, contiguous, empty, grid, kernel
from engine.types import BackendOp as Op


def _ew_grid(n: int) -> tuple:
    return grid((n + 3) >> 2)   # the elementwise kernels move four floats per iteration


def _unary(fwd: str, bwd: str | None, params: tuple[str, ...] = ()):
    kf = kernel("elementwise.cu", fwd)
    kb = kernel("elementwise.cu", bwd) if bwd else None

    def extra(p) -> tuple:
        return tuple(F32(p[name]) for name in params) if params else ()

    def forward(a, **p):
        out = empty(a.shape)
        n = a.size
        if n:
            kf(_ew_grid(n), (a, out, U32(n)) + extra(p))
        return out

    def vjp(inputs, output, g, **p):
        (a,) = inputs
        g = contiguous(g)
        ga = empty(a.shape)
        n = a.size
        if n:
            kb(_ew_grid(n), (a, g, ga, U32(n)) + extra(p))
        return (ga,)

    return forward, vjp


def _binary(fwd: str):
    kf = kernel("elementwise.cu", fwd)

    def forward(a, b):
        out = empty(a.shape)
        n = a.size
        if n:
            kf(_ew_grid(n), (a, b, out, U32(n)))
        return out

    return forward


def _binary_vjp(bwd: str):
    kb = kernel("elementwise.cu", bwd)

    def vjp(inputs, output, g):
        a, b = inputs
        g = contiguous(g)
        ga, gb = empty(a.shape), empty(a.shape)
        n = a.size
        if n:
            kb(grid(n), (a, b, g, ga, gb, U32(n)))
        return ga, gb

    return vjp


def _add_vjp(inputs, output, g):
    return g, g


_neg_kernel = kernel("elementwise.cu", "tl_neg")
_scale_kernel = kernel("elementwise.cu", "tl_scale_fwd")


def _sub_vjp(inputs, output, g):
    g = contiguous(g)
    neg = empty(g.shape)
    if g.size:
        _neg_kernel(_ew_grid(g.size), (g, neg, U32(g.size)))
    return g, neg


def _scale_vjp(inputs, output, g, alpha):
    g = contiguous(g)
    out = empty(g.shape)
    if g.size:
        _scale_kernel(_ew_grid(g.size), (g, out, U32(g.size), F32(alpha)))
    return (out,)


UNARY = {   # op: (forward symbol, backward symbol, float params)
    Op.abs: ("tl_abs_fwd", "tl_abs_bwd", ()), Op.sqrt: ("tl_sqrt_fwd", "tl_sqrt_bwd", ()),
    Op.relu: ("tl_relu_fwd", "tl_relu_bwd", ()), Op.inv: ("tl_inv_fwd", "tl_inv_bwd", ()),
    Op.exp: ("tl_exp_fwd", "tl_exp_bwd", ()), Op.log: ("tl_log_fwd", "tl_log_bwd", ()),
    Op.sin: ("tl_sin_fwd", "tl_sin_bwd", ()), Op.cos: ("tl_cos_fwd", "tl_cos_bwd", ()),
    Op.tanh: ("tl_tanh_fwd", "tl_tanh_bwd", ()),
    Op.sigmoid: ("tl_sigmoid_fwd", "tl_sigmoid_bwd", ()),
    Op.softplus: ("tl_softplus_fwd", "tl_softplus_bwd", ()),
    Op.gelu: ("tl_gelu_fwd", "tl_gelu_bwd", ()),
    Op.clamp: ("tl_clamp_fwd", "tl_clamp_bwd", ("lo", "hi")),
    Op.safe_log: ("tl_safe_log_fwd", "tl_safe_log_bwd", ("eps",)),
}


def handlers() -> dict[Op, tuple]:
    table: dict[Op, tuple] = {}
    for op, (fwd, bwd, params) in UNARY.items():
        table[op] = _unary(fwd, bwd, params)
    for op, fwd, bwd in ((Op.mul, "tl_mul_fwd", "tl_mul_bwd"), (Op.max, "tl_max_fwd", "tl_max_bwd"),
                         (Op.min, "tl_min_fwd", "tl_min_bwd")):
        table[op] = (_binary(fwd), _binary_vjp(bwd))
    scale_fwd, _ = _unary("tl_scale_fwd", None, ("alpha",))
    table.update({
        Op.add: (_binary("tl_add_fwd"), _add_vjp),
        Op.sub: (_binary("tl_sub_fwd"), _sub_vjp),
        Op.scale: (scale_fwd, _scale_vjp),
    })
    return table
