"""The conv family (engine/ops/conv.py): conv and conv_transpose, over 1 to 8 spatial axes, with
groups, stride, padding and dilation.

Edge set (20 cases per op): CONV_TABLE, rows read from the forward conv's side (conv_transpose
takes the same rows with its kernel [C_in, C_out / groups, *k]): stride above the kernel, padding
at the limit, dilation, 1025 and past 2^20 elements, depthwise, grouped, 577 terms per output,
ranks 1 to 5 and 8, batch 0, no input channels, an empty output and an empty spatial axis;
values normal or mixed."""
from __future__ import annotations

from conformance.bad_inputs import BIG, ErrorInput, PARAMETERS, filled
from conformance.edges import MIXED, NORMAL, PAST_2_20, SUMS, Edge
from conformance.families.spec import COUNT, DIMS, EXTENT, RANK, AuditCase, OpSpec, normal
from conformance.samplers import EDGE_EXTENTS
from engine import ops
from engine.errors import ParameterTypeError, ParameterValueError, ShapeError, UInt32OverflowError
from engine.types import BackendOp as Op

GROUP = "convolution and pooling"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

CONV_HIGH_RANKS = (4, 5, 8)          # drawn now and then, with extents of 1 or 2


def _conv_geometry(rng, cls):
    """(rank, batch or None, C_in, C_out, groups, spatial, kernel, stride, padding, dilation)."""
    rank = int(rng.choice((1, 2, 3))) if rng.random() > 0.08 else int(rng.choice(CONV_HIGH_RANKS))
    small = rank > 3
    groups = int(rng.choice((1, 1, 2, 3)))
    c_in, c_out = (groups * int(rng.integers(1, 3)) for _ in range(2))
    if rng.random() < 0.2:                                    # depthwise
        c_in = c_out = groups
    batch = [None, 1, int(rng.integers(2, 4))][int(rng.integers(0, 3))]
    k = tuple(int(rng.integers(1, 3 if small else 4)) for _ in range(rank))
    stride = tuple(int(rng.integers(1, 3 if small else 5)) for _ in range(rank))  # may exceed k
    dilation = tuple(int(rng.integers(1, 3)) for _ in range(rank))
    # padding from 0 up to the limit d (k - 1) (one window of pure padding taps at each edge)
    padding = tuple(int(rng.integers(0, d * (kk - 1) + 1)) for kk, d in zip(k, dilation))
    hi = 3 if small else (9 if rank < 3 else 6)
    spatial = tuple(int(rng.integers(1, hi + 1)) for _ in range(rank))
    if cls == "shapes" and rank == 1:
        spatial = (int(rng.choice(EDGE_EXTENTS[:4])),)
    elif cls == "empty":
        which = int(rng.integers(0, 3))
        if which == 0:
            batch = 0
        elif which == 1:
            c_in, c_out = 0, groups
        else:                                                 # an empty output window
            spatial = tuple(max(1, (d * (kk - 1)) // 2) if kk > 1 else 0
                            for kk, d in zip(k, dilation))
            padding = (0,) * rank
    return rank, batch, c_in, c_out, groups, spatial, k, stride, padding, dilation


def _conv_shapes(rng, cls, transpose: bool):
    rank, batch, c_in, c_out, groups, spatial, k, s, p, d = _conv_geometry(rng, cls)
    lead = () if batch is None else (batch,)
    w = (c_in, c_out // groups) + k if transpose else (c_out, c_in // groups) + k
    shapes = [lead + (c_in,) + spatial, w]
    if rng.random() < 0.75:
        shapes.append((c_out,))
    return shapes, {"stride": s, "padding": p, "dilation": d, "groups": groups}


def conv_layout(rng, cls):
    return _conv_shapes(rng, cls, False)


def conv_transpose_layout(rng, cls):
    return _conv_shapes(rng, cls, True)


# --- the fixed edge set ---------------------------------------------------------------------------
# (batch, C_in, C_out, groups, spatial, kernel, stride, padding, dilation, bias, fill), from the
# forward conv's side: conv_transpose takes the same rows with its kernel [C_in, C_out / groups, *k]
CONV_TABLE = (
    (None, 1, 1, 1, (7,), (3,), (1,), (0,), (1,), True, NORMAL),
    (1, 2, 3, 1, (31,), (2,), (4,), (0,), (1,), True, MIXED),         # stride above the kernel
    (None, 1, 2, 1, (33,), (3,), (1,), (2,), (1,), False, MIXED),     # padding at the limit
    (2, 2, 2, 1, (32,), (3,), (2,), (1,), (3,), True, NORMAL),        # dilation
    (1, 1, 1, 1, (1025,), (3,), (1,), (1,), (1,), True, SUMS),
    (None, 1, 1, 1, (PAST_2_20,), (3,), (1,), (1,), (1,), True, NORMAL),   # past 2^20 elements
    (2, 3, 5, 1, (33, 9), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),
    (1, 4, 4, 4, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), True, MIXED),   # depthwise
    (1, 4, 6, 2, (17, 15), (3, 2), (2, 3), (1, 0), (1, 2), True, NORMAL),
    (None, 64, 2, 1, (4, 4), (3, 3), (1, 1), (1, 1), (1, 1), True, SUMS),  # 577 terms
    (1, 3, 65, 1, (17, 33), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),  # tiles' edges
    (1, 1, 1, 1, (65, 65), (3, 3), (1, 1), (1, 1), (1, 1), False, MIXED),
    (1, 2, 2, 1, (5, 4, 3), (2, 2, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), True, NORMAL),
    (1, 2, 2, 2, (3, 2, 2, 3), (2, 1, 2, 2), (1, 1, 2, 1), (1, 0, 0, 1), (1, 1, 1, 1), True,
     MIXED),
    (None, 1, 2, 1, (2, 2, 1, 2, 2), (2, 1, 1, 2, 1), (1,) * 5, (0, 1, 0, 1, 0), (1,) * 5, True,
     NORMAL),
    (1, 1, 1, 1, (2,) * 8, (2,) * 8, (1,) * 8, (0,) * 8, (1,) * 8, True, NORMAL),   # rank 8
    (0, 2, 3, 1, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),   # batch 0
    (1, 0, 3, 1, (5,), (3,), (1,), (1,), (1,), True, NORMAL),             # no input channels
    (1, 2, 2, 1, (2,), (5,), (1,), (0,), (1,), True, NORMAL),             # an empty output
    (2, 3, 2, 1, (4, 0), (1, 2), (1, 1), (0, 1), (1, 1), True, NORMAL),   # an empty spatial axis
)


def _edges(transpose: bool):
    def build() -> list[Edge]:
        out = []
        for batch, ci, co, g, spatial, k, s, p, d, bias, fill in CONV_TABLE:
            lead = () if batch is None else (batch,)
            if transpose:   # the transposed op reads the rows backwards: C_out channels in, C_in out
                ci, co = co, ci
            w = (ci, co // g) + k if transpose else (co, ci // g) + k
            shapes = (lead + (ci,) + spatial, w) + (((co,),) if bias else ())
            params = (("stride", s), ("padding", p), ("dilation", d), ("groups", g))
            out.append(Edge(shapes, params, NORMAL if fill == SUMS else fill))
        return out
    return build


# --- the determinism case and the guards ----------------------------------------------------------

def _conv_audit(transpose: bool):
    def draw(rng, idx):
        # 1600 positions per kernel element: 7 dKernel chunks racing in the atomic mode, over
        # 2304 kernel elements; 25600 outputs, each checked against its exact dot product
        x, w, b = normal(rng, 4, 16, 20, 20), normal(rng, 16, 16, 3, 3), normal(rng, 16)
        params = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
        return (x, w, b), params, (4, 16, 20, 20)
    return draw


def _cv(s, x=(2, 5, 5), w=(3, 2, 3, 3), b=None, transpose=False, **kw):
    """A conv (or conv_transpose) call on good tensors of the given shapes."""
    fn = ops.conv_transpose if transpose else ops.conv
    return fn(filled(s, x), filled(s, w), None if b is None else filled(s, b), **kw)


def _conv_errors(position: int, op: str, transpose: bool):
    """The guards of one convolution op. Positions 44..51 of the reserved range are already
    taken (rand_uniform .. safe_log), so each op takes one free position and numbers its cases
    beneath it: ranks (PARAMETERS, position, 0..17)."""
    t = transpose

    def _param(sub, name, check, call, error, message):
        return ErrorInput((PARAMETERS, position, sub), name, check, call, error, message)
    w_bad_ch = (3, 2, 3, 3) if not t else (3, 2, 3, 3)
    return (
        _param(0, f"{op}: kernel rank 2", RANK, lambda s: _cv(s, (2, 5), (3, 2), None, t),
               ShapeError, r"the kernel has shape \(3, 2\) \(spatial rank 0\)"),
        _param(1, f"{op}: kernel rank 11", RANK,
               lambda s: _cv(s, (1,) * 10, (1,) * 11, None, t), ShapeError,
               r"spatial rank 9\); wants rank 3..10"),
        _param(2, f"{op}: x rank for the kernel", RANK,
               lambda s: _cv(s, (1, 2, 5, 5), (2, 2, 3), None, t), ShapeError,
               r"x has shape \(1, 2, 5, 5\) but a kernel of spatial rank 1 wants x of rank 2"),
        _param(3, f"{op}: kernel extent 0", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 0, 3), None, t), ShapeError,
               r"kernel extent 0 in kernel shape \(2, 2, 0, 3\)"),
        _param(4, f"{op}: channel mismatch", DIMS,
               lambda s: _cv(s, (4, 5, 5), w_bad_ch, None, t), ShapeError,
               r"x has 4 channels but the kernel \(3, 2, 3, 3\)"),
        _param(5, f"{op}: groups do not divide", DIMS,
               lambda s: _cv(s, (3, 5, 5), (3, 1, 3, 3), None, t, groups=2), ParameterValueError,
               r"groups=2 must divide both channel counts"),
        _param(6, f"{op}: groups 0", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, groups=0), ParameterValueError,
               r"groups must be at least 1, got 0"),
        _param(7, f"{op}: stride 0", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, stride=0), ParameterValueError,
               r"stride \(0, 0\) must be positive on every axis"),
        _param(8, f"{op}: dilation 0", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, dilation=(1, 0)),
               ParameterValueError, r"dilation \(1, 0\) must be positive"),
        _param(9, f"{op}: negative padding", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, padding=(-1, 0)),
               ParameterValueError, r"padding \(-1, 0\) must be non-negative"),
        _param(10, f"{op}: stride of 3 entries for rank 2", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, stride=(1, 1, 1)),
               ParameterValueError, r"stride \(1, 1, 1\) has 3 entries, the kernel has spatial "
                                    r"rank 2"),
        _param(11, f"{op}: float padding", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, padding=0.5),
               ParameterTypeError, r"padding must be an int or a sequence of 2 ints, got float"),
        _param(12, f"{op}: bias shape", DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), (3,), t), ShapeError,
               r"bias has shape \(3,\), expected \(2,\)"),
        _param(13, f"{op}: stride 2^32", EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, stride=BIG), UInt32OverflowError,
               r"stride 4294967296 is over the UInt32 limit"),
        _param(14, f"{op}: padding 2^32", EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, padding=BIG), UInt32OverflowError,
               r"padding 4294967296 is over the UInt32 limit"),
        _param(15, f"{op}: dilation 2^32", EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, dilation=BIG), UInt32OverflowError,
               r"dilation 4294967296 is over the UInt32 limit"),
        # no channels: the element count is 0, the spatial product alone overflows
        _param(16, f"{op}: spatial product 2^32 behind 0 channels", COUNT,
               lambda s: _cv(s, (0, 2**16, 2**16), (2, 0, 1, 1) if not t else (0, 2, 1, 1), None,
                             t), UInt32OverflowError,
               r"the spatial product of x \(65536, 65536\) is 4294967296"),
        _param(17, f"{op}: padded extent over UInt32", EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, padding=2**31), UInt32OverflowError,
               r"the padded extent 5 \+ 2\*2147483648 is 4294967301"),
    )


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    # focus None: a failing output reads a window of x across channels; shrinking keeps the
    # case whole
    OpSpec(Op.conv, conv_layout, _edges(False), catalogue=47,
        extra_classes=("params",), near_overflow=2.0 ** 63, products=True, focus=None,
        determinism=AuditCase(9, _conv_audit(False)),
        error_inputs=_conv_errors(52, "conv", False), summary_group=GROUP),
    OpSpec(Op.conv_transpose, conv_transpose_layout, _edges(True), catalogue=48,
        extra_classes=("params",), near_overflow=2.0 ** 63, products=True, focus=None,
        determinism=AuditCase(10, _conv_audit(True)),
        error_inputs=_conv_errors(53, "conv_transpose", True),
        summary_group=GROUP),
)
