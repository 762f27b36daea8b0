"""The pooling family (engine/ops/pooling.py): max_pool (selects, exact), avg_pool (divides a sum
once) and smooth_max_pool (a log-sum-exp), over 1 to 8 spatial axes.

Edge set (23 cases per op): POOL_EDGES: odd extents, strides past the kernel, padding at k/2,
dilation, ranks 1-3 and 8, batch absent/0/1/2, TorchLean's 17x17 k3 s1 p1, the benchmark's
56x56 planes, 1025x1025 (past 2^20), a window of padding only, and five empty forms (C = 0,
N = 0, spatial 0, padding past k/2, a window longer than the input); values mixed, normal or
`ties` (integers in [-2, 2] with both zeros: repeated maxima, all-equal windows);
smooth_max_pool's beta cycles POOL_BETAS."""
from __future__ import annotations

from conformance import exact_cases
from conformance.bad_inputs import BIG, ErrorInput, filled
from conformance.edges import MIXED, NORMAL, TIES, Edge, cycle
from conformance.families.spec import (COUNT, DIMS, ELEMENTARY_ORDER, EXTENT, RANK, AuditCase,
                                       OpSpec, m23, normal, param, unary)
from conformance.samplers import F32
from engine import ops
from engine.errors import (ParameterTypeError, ParameterValueError, ShapeError,
                           UInt32OverflowError)
from engine.types import BackendOp as Op

GROUP = "convolution and pooling"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

POOL_EDGE_EXTENTS = (31, 33, 57, 65)   # odd spatial extents for the "shapes" class
SMOOTH_BETAS = (0.5, -0.5, 1.0, -3.0, 30.0, 1e-3, -2.0 ** -20, 1e4)
SMOOTH_PARAM_BETAS = (0.5, 1e30, -1e30, 2.0 ** -126, 3e38, -7.0)


def _pool_axis(rng, cls, big: bool):
    """(in, k, s, p, d) of one spatial axis: strides up to past the kernel, padding up to k/2,
    dilation 1-3; extents that leave at least one window unless the class asks for none."""
    k = int(rng.integers(1, 5))
    s = int(rng.integers(1, k + 3))
    d = int(rng.choice([1, 1, 2, 3]))
    p = int(rng.integers(0, k // 2 + 1))
    if rng.integers(0, 4) == 0:
        p = k // 2                                           # padding at the limit k/2
    span = d * (k - 1) + 1
    n = int(rng.choice(POOL_EDGE_EXTENTS)) if big else int(rng.integers(max(1, span - 2 * p), 13))
    return n, k, s, p, d


def pool_layout(rng, cls):
    """x ([N,] C, *spatial) with spatial rank 1-3 (now and then 4-8 with extents of 1-3), N absent,
    0, 1 or 2, C 1-3; per-axis kernel, stride, padding and dilation (_pool_axis). "empty" empties
    one of N, C, a spatial extent, or the output (padding past k/2, or a window longer than the
    padded input)."""
    r = int(rng.choice([1, 2, 2, 3])) if rng.integers(0, 8) else int(rng.integers(4, 9))
    big = cls == "shapes" and r <= 2
    axes = [_pool_axis(rng, cls, big and j == r - 1) for j in range(r)]
    if r >= 4:   # small high-rank cases: at most a few thousand cells
        axes = [(min(n, 3), min(k, 2), min(s, 2), min(p, min(k, 2) // 2), 1)
                for n, k, s, p, d in axes]
        axes = [(max(n, k), k, s, p, d) for n, k, s, p, d in axes]
    spatial, k, s, p, d = (list(t) for t in zip(*axes))
    lead = [int(rng.integers(1, 4))]
    batch = int(rng.integers(0, 3))
    if batch:
        lead = [int(rng.integers(1, 3))] + lead
    if cls == "empty":
        which = int(rng.integers(0, 5))
        j = int(rng.integers(0, r))
        if which == 0:
            lead[0] = 0
        elif which == 1:
            lead[-1] = 0
        elif which == 2:
            spatial[j] = 0
        elif which == 3:
            p[j] = k[j] // 2 + 1                             # p > k/2: an empty output
        else:
            spatial[j] = max(d[j] * (k[j] - 1) - 2 * p[j], 0)   # one cell short of a window
    params = {"kernel_size": tuple(k), "stride": tuple(s), "padding": tuple(p),
              "dilation": tuple(d)}
    return [tuple(lead) + tuple(spatial)], params


def smooth_pool_layout(rng, cls):
    """pool_layout with beta: SMOOTH_BETAS, or the extremes of SMOOTH_PARAM_BETAS for "params"."""
    shapes, params = pool_layout(rng, cls)
    betas = SMOOTH_PARAM_BETAS if cls == "params" else SMOOTH_BETAS
    params["beta"] = float(F32(rng.choice(betas)))
    return shapes, params


# --- the fixed edge set ---------------------------------------------------------------------------

POOL_BETAS = (0.5, -0.5, 2.0, -1e-3, 30.0, 1.0)


# (x shape, kernel_size, stride, padding, dilation, fill): odd extents, strides past the kernel,
# padding at k/2, dilation, ranks 1-3 and 8, batch absent/0/1/2, TorchLean's 17x17 k3 s1 p1 case,
# the benchmark's 56x56 planes, one case past 2^20 elements, and empty outputs of every kind.
POOL_EDGES = (
    ((1, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), TIES),
    ((2, 3, 17, 17), (3, 3), (1, 1), (1, 1), (1, 1), MIXED),
    ((1, 1, 33), (3,), (2,), (1,), (1,), MIXED),
    ((1, 257), (4,), (4,), (0,), (1,), TIES),
    ((3, 7, 5, 6), (2, 2, 2), (1, 2, 3), (1, 1, 0), (1, 1, 2), MIXED),
    ((2, 2, 4, 5, 3), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), TIES),
    ((1, 64, 56, 56), (3, 3), (2, 2), (1, 1), (1, 1), MIXED),
    ((32, 4, 56, 56), (2, 2), (2, 2), (0, 0), (1, 1), NORMAL),
    ((1, 1, 1025, 1025), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),
    ((2, 1, 65537), (3,), (1,), (1,), (1,), MIXED),
    ((1,) + (2,) * 8, (2,) * 8, (1,) * 8, (0,) * 8, (1,) * 8, TIES),
    ((2, 3, 2, 3, 2, 1, 2, 2, 3), (2, 1, 2, 1, 1, 2, 1, 2), (1,) * 8, (1, 0, 1, 0, 0, 1, 0, 1),
     (1,) * 8, MIXED),
    ((1, 31, 31), (3, 3), (1, 1), (0, 0), (7, 7), MIXED),
    ((2, 30, 30), (2, 2), (5, 5), (0, 0), (1, 1), MIXED),
    ((1, 9, 9), (2, 2), (1, 1), (1, 1), (1, 1), TIES),
    ((1, 1), (2,), (1,), (1,), (2,), MIXED),             # the one window is all padding
    ((1, 4099), (7,), (3,), (3,), (1,), MIXED),
    ((3, 251, 7), (5, 2), (3, 1), (2, 1), (1, 3), MIXED),
    ((0, 4, 4), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),  # C = 0
    ((0, 2, 5, 5), (2, 2), (1, 1), (1, 1), (1, 1), MIXED),   # N = 0
    ((1, 0, 4), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),  # an empty spatial extent
    ((2, 3, 3), (3, 3), (1, 1), (2, 2), (1, 1), MIXED),  # padding past k/2: an empty output
    ((1, 2, 2), (3, 3), (1, 1), (0, 0), (1, 1), MIXED),  # a window longer than the input
)


def _edges(beta: bool):
    def build() -> list[Edge]:
        out = []
        for i, (x, k, s, p, d, fill) in enumerate(POOL_EDGES):
            params = (("kernel_size", k), ("stride", s), ("padding", p), ("dilation", d))
            if beta:
                params += (("beta", cycle(POOL_BETAS, i)),)
            out.append(Edge((x,), params, fill))
        return out
    return build


# --- the determinism case and the geometry checks -------------------------------------------------

def _pool_audit(rng, **extra):
    """Overlapping 3x3 windows (stride 1, padding 1) over 16 planes of 64x64: every input cell is
    scattered to from nine windows, by threads of different blocks."""
    params = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1),
              **extra}
    return (normal(rng, 4, 4, 64, 64),), params, (4, 4, 64, 64)


def _pool_geometry_errors() -> tuple[ErrorInput, ...]:
    """max_pool's geometry checks (avg_pool and smooth_max_pool share the code: a few of theirs
    stand beside their records)."""
    mp = ops.max_pool
    big = (BIG,)
    return (
        param(70, "max_pool: spatial rank 9", RANK, lambda s: mp(m23(s), (1,) * 9), ShapeError,
              r"kernel_size \(1, 1, 1, 1, 1, 1, 1, 1, 1\) has spatial rank 9; pooling supports "
              r"ranks 1 to 8"),
        param(71, "max_pool: spatial rank 0", RANK, lambda s: mp(m23(s), ()), ShapeError,
              r"kernel_size \(\) has spatial rank 0"),
        param(72, "max_pool: x rank 4 for a 1-D window", RANK,
              lambda s: mp(filled(s, (1, 1, 2, 3)), (1,)), ShapeError,
              r"x has shape \(1, 1, 2, 3\) \(rank 4\) but a spatial rank of 1 \(kernel_size "
              r"\(1,\)\) needs x \(C, \*spatial\) of rank 2 or \(N, C, \*spatial\) of rank 3"),
        param(73, "max_pool: kernel extent 0", DIMS, lambda s: mp(m23(s), (0,)),
              ParameterValueError, r"kernel_size \(0,\) has 0 on spatial axis 0; every window "
                                    r"extent must be at least 1"),
        param(74, "max_pool: stride 0", DIMS, lambda s: mp(m23(s), (1,), stride=(0,)),
              ParameterValueError, r"stride \(0,\) has 0 on spatial axis 0"),
        param(75, "max_pool: negative padding", DIMS, lambda s: mp(m23(s), (2,), padding=-1),
              ParameterValueError, r"padding \(-1,\) has -1 on spatial axis 0; padding cannot "
                                    r"be negative"),
        param(76, "max_pool: dilation 0", DIMS, lambda s: mp(m23(s), (1,), dilation=0),
              ParameterValueError, r"dilation \(0,\) has 0 on spatial axis 0"),
        param(77, "max_pool: kernel extent 2^32", EXTENT, lambda s: mp(m23(s), big),
              UInt32OverflowError, r"kernel_size \(4294967296,\) has 4294967296 on spatial "
                                    r"axis 0, over the UInt32 limit 4294967295"),
        param(78, "max_pool: stride 2^32", EXTENT, lambda s: mp(m23(s), (1,), stride=big),
              UInt32OverflowError, r"stride \(4294967296,\) has 4294967296"),
        param(79, "max_pool: padding 2^32", EXTENT, lambda s: mp(m23(s), (1,), padding=big),
              UInt32OverflowError, r"padding \(4294967296,\) has 4294967296"),
        param(80, "max_pool: dilation 2^32", EXTENT, lambda s: mp(m23(s), (1,), dilation=big),
              UInt32OverflowError, r"dilation \(4294967296,\) has 4294967296"),
        param(81, "max_pool: input spatial 2^32 under C = 0", COUNT,
              lambda s: mp(filled(s, (0, 2**16, 2**16)), (1, 1)), UInt32OverflowError,
              r"the input spatial extents \(65536, 65536\) hold 4294967296 cells, over the "
              r"UInt32 limit"),
        param(82, "max_pool: window 2^32 cells", COUNT,
              lambda s: mp(filled(s, (0, 1, 1)), (2**16, 2**16)), UInt32OverflowError,
              r"the window extents \(65536, 65536\) hold 4294967296 cells"),
        param(83, "max_pool: output spatial past UInt32 under C = 0", COUNT,
              lambda s: mp(filled(s, (0, 65535, 65536)), 2, stride=1, padding=1),
              UInt32OverflowError, r"the output spatial extents \(65536, 65537\) hold "
                                    r"4295032832 cells"),
        param(84, "max_pool: stride of the wrong length", DIMS,
              lambda s: mp(m23(s), (1,), stride=(1, 1)), ShapeError,
              r"stride \(1, 1\) has 2 entries for a spatial rank of 1"),
        param(85, "max_pool: float kernel_size", DIMS, lambda s: mp(m23(s), 2.0),
              ParameterTypeError, r"kernel_size must be an int or a sequence of ints, got float"),
        param(86, "max_pool: bool stride", DIMS, lambda s: mp(m23(s), (1,), stride=True),
              ParameterTypeError, r"stride must be an int or a sequence of 1 ints, got bool True"),
    )


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.max_pool, pool_layout, _edges(False), catalogue=40,
        cancellation=None, determinism=AuditCase(11, lambda rng, idx: _pool_audit(rng)),
        error_inputs=(*unary(21, Op.max_pool, lambda a: ops.max_pool(a, (1,))),
                      *_pool_geometry_errors()),
        summary_group=GROUP),
    OpSpec(Op.avg_pool, pool_layout, _edges(False), catalogue=41,
        extra_roundings=1, divides_sum=True, products=True,
        determinism=AuditCase(12, lambda rng, idx: _pool_audit(rng)),
        error_inputs=(
            *unary(22, Op.avg_pool, lambda a: ops.avg_pool(a, (1,))),
            param(87, "avg_pool: stride 0", DIMS,
                  lambda s: ops.avg_pool(m23(s), (1,), stride=0), ParameterValueError,
                  r"stride \(0,\) has 0 on spatial axis 0; every stride must be at least 1"),
            param(88, "avg_pool: spatial 2^32 under C = 0", COUNT,
                  lambda s: ops.avg_pool(filled(s, (0, 2**16, 2**16)), 1),
                  UInt32OverflowError, r"input spatial extents \(65536, 65536\) hold "
                                        r"4294967296 cells"),
            param(89, "avg_pool: x rank 2 for a 2-D window", RANK,
                  lambda s: ops.avg_pool(m23(s), 2), ShapeError,
                  r"x has shape \(2, 3\) \(rank 2\) but a spatial rank of 2")),
        summary_group=GROUP, exact_sums=exact_cases.POOL),
    OpSpec(Op.smooth_max_pool, smooth_pool_layout, _edges(True), catalogue=42,
        extra_classes=("params",), products=True,
        determinism=AuditCase(13, lambda rng, idx: _pool_audit(rng, beta=0.5)),
        error_inputs=(
            *unary(23, Op.smooth_max_pool, lambda a: ops.smooth_max_pool(a, (1,), 0.5)),
            *(param(pos, f"smooth_max_pool: beta {name}", DIMS,
                    lambda s, b=beta: ops.smooth_max_pool(m23(s), (1,), b),
                    ParameterValueError, r"beta must be finite and nonzero after rounding to "
                                          r"float32, got " + shown)
              for pos, name, beta, shown in (
                  (90, "0", 0.0, r"0\.0"), (91, "inf", float("inf"), r"inf"),
                  (92, "nan", float("nan"), r"nan"), (93, "1e-50 (rounds to 0)", 1e-50,
                                                      r"1e-50 \(float32 0\.0\)"),
                  (94, "1e39 (rounds to inf)", 1e39, r"1e\+39 \(float32 inf\)"))),
            param(95, "smooth_max_pool: string beta", DIMS,
                  lambda s: ops.smooth_max_pool(m23(s), (1,), "big"), ParameterTypeError,
                  r"beta must be a real number, got str 'big'"),
            param(96, "smooth_max_pool: kernel extent 0", DIMS,
                  lambda s: ops.smooth_max_pool(m23(s), (0,), 0.5), ParameterValueError,
                  r"kernel_size \(0,\) has 0 on spatial axis 0"),
            param(97, "smooth_max_pool: spatial 2^32 under C = 0", COUNT,
                  lambda s: ops.smooth_max_pool(filled(s, (0, 2**16, 2**16)), 1, 0.5),
                  UInt32OverflowError, r"input spatial extents \(65536, 65536\) hold")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER),
)
