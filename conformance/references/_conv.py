"""Exact references shared by conv and conv_transpose: every output of the forward and of each
gradient is a dot product over gathered terms (im2col and its adjoint), evaluated by
`matmul_exact` (exact float64 products, exact sums, rounded once) with out-of-range taps taking no
part at all: an input or kernel inf or NaN whose partner is an out-of-range tap contributes
nothing (0 * inf would be NaN), and `terms` counts the taps in range per element (plus the bias).
"""
from __future__ import annotations

import math

import numpy as np

from conformance import rounding
from conformance.references._common import Reference, ReferenceInputError, matmul_exact, \
    sum_last_axis
from engine.convolution import Geometry


def _positions(extents):
    """Every multi-index of `extents`, row-major: an int array [prod, rank]."""
    grids = np.meshgrid(*(np.arange(e) for e in extents), indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=-1).reshape(-1, len(extents))


def _flat(index, extents):
    """Row-major flat index of multi-indices [..., rank] into `extents`."""
    flat = np.zeros(index.shape[:-1], np.int64)
    for a, e in enumerate(extents):
        flat = flat * e + index[..., a]
    return flat


def forward_taps(geo: Geometry):
    """For every output position o and tap t: the input position read (flat) and whether it is
    in range; arrays [outS, prodK]."""
    o = _positions(geo.out)[:, None, :]
    t = _positions(geo.k)[None, :, :]
    s, p, d = (np.asarray(v, np.int64) for v in (geo.stride, geo.padding, geo.dilation))
    i = o * s - p + t * d
    ok = np.all((i >= 0) & (i < np.asarray(geo.inp, np.int64)), axis=-1)
    return np.where(ok, _flat(np.where(ok[..., None], i, 0), geo.inp), 0), ok


def adjoint_taps(geo: Geometry):
    """For every input position i and tap t: the output position whose window reads i through t
    (flat) and whether there is one; arrays [inS, prodK]."""
    i = _positions(geo.inp)[:, None, :]
    t = _positions(geo.k)[None, :, :]
    s, p, d = (np.asarray(v, np.int64) for v in (geo.stride, geo.padding, geo.dilation))
    num = i + p - t * d
    o = num // s
    ok = np.all((num >= 0) & (num % s == 0) & (o < np.asarray(geo.out, np.int64)), axis=-1)
    return np.where(ok, _flat(np.where(ok[..., None], o, 0), geo.out), 0), ok


def masked_product(a, b, mask_a=None, mask_b=None) -> Reference:
    """Exact a @ b ([P, M, K] @ [P, K, N]) where masked-out entries of a (or b) take no part:
    kind 'reduction', terms = the entries in play per element."""
    a = np.where(mask_a, a, np.float32(0)) if mask_a is not None else a
    b = np.where(mask_b, b, np.float32(0)) if mask_b is not None else b
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    value, exact, magnitude = matmul_exact(a, b)
    shape = value.shape
    if mask_a is not None:
        terms = np.broadcast_to(mask_a.sum(axis=-1)[..., :, None], shape)
    elif mask_b is not None:
        terms = np.broadcast_to(mask_b.sum(axis=-2)[..., None, :], shape)
    else:
        terms = np.full(shape, a.shape[-1])
    special = ~(np.all(np.isfinite(a), axis=-1)[..., :, None] & np.all(np.isfinite(b), axis=-2)
                [..., None, :])
    if np.any(special):   # IEEE over the terms in play only (matmul_exact saw 0 * inf there)
        ma = np.ones(a.shape, bool) if mask_a is None else mask_a
        mb = np.ones(b.shape, bool) if mask_b is None else mask_b
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ieee, mag = np.zeros(shape), np.zeros(shape)
        with np.errstate(all="ignore"):
            for k in range(a.shape[-1]):
                live = ma[..., :, k, None] & mb[..., k, None, :]
                prod = a64[..., :, k, None] * b64[..., k, None, :]
                ieee += np.where(live, prod, 0.0)
                mag += np.where(live, np.abs(prod), 0.0)
        value = np.where(special, rounding.round_f64_to_f32(ieee), value)
        exact = np.where(special, ieee, exact)
        magnitude = np.where(special, mag, magnitude)
    return Reference(value, exact, magnitude, np.asarray(terms, np.int64), "reduction")


def _with_bias(a, b, mask, bias, groups):
    """Append the bias as one more term: a column of ones in a, the bias row in b."""
    ones = np.ones(a.shape[:-1] + (1,), np.float32)
    per_group = bias.reshape(groups, 1, -1)
    rep = a.shape[0] // groups
    brow = np.tile(per_group, (rep, 1, 1))
    return (np.concatenate([a, ones], axis=-1), np.concatenate([b, brow], axis=-2),
            np.concatenate([mask, np.ones(ones.shape, bool)], axis=-1))


def _layout(ref: Reference, shape, perm) -> Reference:
    """Reshape and transpose every field of a [P, M, N] reference into the op's layout."""
    def f(x):
        return np.ascontiguousarray(np.transpose(np.asarray(x).reshape(shape), perm))
    return Reference(f(ref.value), f(ref.exact), f(ref.magnitude), f(ref.terms), ref.kind)


def conv_forward(geo: Geometry, x, w, bias=None) -> Reference:
    """conv(x, w) + bias: x [N, C_in, *inp] -> [N, C_out, *out]."""
    G, cg, og = geo.groups, geo.c_in // geo.groups, geo.c_out // geo.groups
    ks, os_ = math.prod(geo.k), math.prod(geo.out)
    idx, ok = forward_taps(geo)                                  # [outS, ks]
    xg = x.reshape(geo.n * G, cg, math.prod(geo.inp))
    gathered = xg[:, :, idx] if xg.shape[-1] else np.zeros((geo.n * G, cg, os_, ks), np.float32)
    a = np.transpose(gathered, (0, 2, 1, 3)).reshape(geo.n * G, os_, cg * ks)
    mask = np.broadcast_to(ok[None, :, None, :], (geo.n * G, os_, cg, ks)).reshape(a.shape)
    wb = np.transpose(w.reshape(G, og, cg * ks), (0, 2, 1))     # [G, cg*ks, og]
    b = np.tile(wb, (geo.n, 1, 1))
    if bias is not None:
        a, b, mask = _with_bias(a, b, mask, bias, G)
    ref = _layout(masked_product(a, b, mask_a=mask), (geo.n, G, os_, og), (0, 1, 3, 2))
    return Reference(*(_reshape(v, (geo.n, geo.c_out) + geo.out) for v in _fields(ref)),
                     kind="reduction")


def _fields(ref):
    return ref.value, ref.exact, ref.magnitude, ref.terms


def _reshape(v, shape):
    return np.asarray(v).reshape(shape)


def conv_input_grad(geo: Geometry, gy, w, bias=None) -> Reference:
    """The adjoint of conv applied to gy [N, C_out, *out] (plus bias [C_in]): [N, C_in, *inp]."""
    G, cg, og = geo.groups, geo.c_in // geo.groups, geo.c_out // geo.groups
    ks, ins = math.prod(geo.k), math.prod(geo.inp)
    idx, ok = adjoint_taps(geo)                                  # [inS, ks]
    gg = gy.reshape(geo.n * G, og, math.prod(geo.out))
    gathered = gg[:, :, idx] if gg.shape[-1] else np.zeros((geo.n * G, og, ins, ks), np.float32)
    a = np.transpose(gathered, (0, 2, 1, 3)).reshape(geo.n * G, ins, og * ks)
    mask = np.broadcast_to(ok[None, :, None, :], (geo.n * G, ins, og, ks)).reshape(a.shape)
    wb = w.reshape(G, og, cg, ks).transpose(0, 1, 3, 2).reshape(G, og * ks, cg)
    b = np.tile(wb, (geo.n, 1, 1))
    if bias is not None:
        a, b, mask = _with_bias(a, b, mask, bias, G)
    ref = _layout(masked_product(a, b, mask_a=mask), (geo.n, G, ins, cg), (0, 1, 3, 2))
    return Reference(*(_reshape(v, (geo.n, geo.c_in) + geo.inp) for v in _fields(ref)),
                     kind="reduction")


def conv_kernel_grad(geo: Geometry, gy, x) -> Reference:
    """dw [C_out, C_in / groups, *k] = sum over N and output positions of gy * x (taps in range)."""
    G, cg, og = geo.groups, geo.c_in // geo.groups, geo.c_out // geo.groups
    ks, os_ = math.prod(geo.k), math.prod(geo.out)
    idx, ok = forward_taps(geo)
    a = np.transpose(gy.reshape(geo.n, G, og, os_), (1, 2, 0, 3)).reshape(G, og, geo.n * os_)
    xg = x.reshape(geo.n, G, cg, math.prod(geo.inp))
    gathered = xg[:, :, :, idx] if xg.shape[-1] else np.zeros((geo.n, G, cg, os_, ks), np.float32)
    b = np.transpose(gathered, (1, 0, 3, 2, 4)).reshape(G, geo.n * os_, cg * ks)
    mask = np.broadcast_to(ok[None, None, :, None, :], (G, geo.n, os_, cg, ks)).reshape(b.shape)
    ref = masked_product(np.ascontiguousarray(a), b, mask_b=mask)   # [G, og, cg*ks]
    return Reference(*(_reshape(v, (geo.c_out, cg) + geo.k) for v in _fields(ref)),
                     kind="reduction")


def bias_grad(gy, channels: int) -> Reference:
    n, spatial = gy.shape[0], math.prod(gy.shape[2:])
    rows = np.moveaxis(gy.reshape(n, channels, spatial), 1, 0).reshape(channels, n * spatial)
    rows = np.ascontiguousarray(rows)
    value, exact, magnitude = sum_last_axis(rows)
    return Reference(value, exact, magnitude, rows.shape[1], "reduction")


def check_inputs(inputs, op: str):
    from conformance.references._common import f32_inputs
    if len(inputs) not in (2, 3):
        raise ReferenceInputError(f"{op} takes x, w and an optional bias, got {len(inputs)} arrays")
    return f32_inputs(inputs, len(inputs), op)
