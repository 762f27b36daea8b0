"""The output size of a replay file's case, from its declared shapes and parameters alone, for the
ops whose output (or the window table their reference builds) can be far larger than their inputs:
a replay checks it against its cap before anything is allocated (replay.py). Every other op's
output is no larger than a small multiple of its inputs, which the cap already counts. Convolution
and pooling parameters that do not fit the shapes are a GeometryError naming the parameter (their
references assume a fitting geometry); another layout that does not fit its op gives None: the
reference refuses such a case itself, unjudged."""
from __future__ import annotations

import math
from typing import Callable

from engine.convolution import conv_extent, transpose_extent

Shapes = list[tuple[int, ...]]


class GeometryError(ValueError):
    """Convolution or pooling parameters (or shapes) that do not fit each other; `field` names
    the parameter or input."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field


def _matmul(shapes: Shapes, params: dict) -> int | None:
    if len(shapes) != 2 or min(len(s) for s in shapes) < 2:
        return None
    a, b = shapes
    m = a[-1] if params.get("trans_a") else a[-2]
    n = b[-2] if params.get("trans_b") else b[-1]
    return max(math.prod(a[:-2]), math.prod(b[:-2])) * m * n


def _linear(shapes: Shapes, params: dict) -> int | None:
    if len(shapes) < 2 or not shapes[0] or len(shapes[1]) != 2:
        return None
    return math.prod(shapes[0][:-1]) * shapes[1][0]


def _gather(shapes: Shapes, params: dict) -> int | None:
    indices, axis = params.get("indices"), params.get("axis")
    if len(shapes) != 1 or indices is None or not isinstance(axis, int) or \
            not -len(shapes[0]) <= axis < len(shapes[0]):
        return None
    a = list(shapes[0])
    a[axis] = indices.elements
    return math.prod(a)


def _attention(shapes: Shapes, params: dict) -> int | None:
    """Scores [.., Lq, Lk] and output [.., Lq, Dv]."""
    if len(shapes) != 3 or min(len(s) for s in shapes) < 2:
        return None
    q, k, v = shapes
    return math.prod(q[:-2]) * q[-2] * (k[-2] + v[-1])


def _attention_heads(shapes: Shapes, params: dict) -> int | None:
    """Scores [B, H, T, T] and output [B, T, H*D]."""
    heads = params.get("heads", 1)
    if len(shapes) != 3 or len(shapes[0]) != 3 or not isinstance(heads, int):
        return None
    b, t, width = shapes[0]
    return b * max(heads, 1) * t * t + b * t * width


def _spatial_params(params: dict, rank: int, names: tuple[str, ...], defaults: tuple[int, ...]):
    """Per-axis tuples of the named parameters (a missing one is its default on every axis); the
    lists must have one entry per spatial axis (their ranges are replay.LEAST's)."""
    out = []
    for name, default in zip(names, defaults):
        value = params.get(name, default)
        value = (value,) * rank if isinstance(value, int) else tuple(value)
        if len(value) != rank:
            raise GeometryError(name, f"{list(value)} has {len(value)} entries, but the case has "
                                      f"{rank} spatial axes: give one per axis")
        out.append(value)
    return out


def _fitting_ranks(x: tuple[int, ...], rank: int, what: str) -> None:
    if len(x) not in (rank + 1, rank + 2):
        raise GeometryError("inputs[0]", f"x has shape {list(x)}, but {what} of spatial rank "
                                         f"{rank} takes x of rank {rank + 1} or {rank + 2}")


def _conv(extent: Callable, transposed: bool) -> Callable:
    def estimate(shapes: Shapes, params: dict) -> int | None:
        if len(shapes) not in (2, 3) or not 1 <= len(shapes[1]) - 2:
            return None
        x, w = shapes[0], shapes[1]
        rank = len(w) - 2
        _fitting_ranks(x, rank, "a kernel")
        geometry = _spatial_params(params, rank, ("stride", "padding", "dilation"), (1, 0, 1))
        groups = params.get("groups", 1)
        c_in = x[-rank - 1]
        c_out = w[1] * groups if transposed else w[0]
        takes = w[0] if transposed else w[1] * groups
        if c_in != takes or c_in % groups or c_out % groups:
            raise GeometryError("groups", f"{groups} with x of {c_in} channels and a kernel of "
                                          f"shape {list(w)} does not fit: the kernel takes "
                                          f"{takes} channels, and groups must divide both "
                                          "channel counts")
        if len(shapes) == 3 and shapes[2] != (c_out,):
            raise GeometryError("inputs[2]", f"the bias has shape {list(shapes[2])}, the output "
                                             f"{c_out} channels")
        batch = x[0] if len(x) == rank + 2 else 1
        out = [extent(n, k, s, p, d) for n, k, s, p, d in zip(x[-rank:], w[2:], *geometry)]
        return batch * c_out * math.prod(out)
    return estimate


def _pool(shapes: Shapes, params: dict) -> int | None:
    """Output, and the reference's window tables: out x window cells, window offsets per axis."""
    kernel = params.get("kernel_size")
    if len(shapes) != 1 or not isinstance(kernel, tuple) or not kernel:
        return None
    rank = len(kernel)
    x = shapes[0]
    _fitting_ranks(x, rank, "a pooling window")
    geometry = _spatial_params(params, rank, ("kernel_size", "stride", "padding", "dilation"),
                               (1, 1, 0, 1))
    out = math.prod(conv_extent(n, k, s, p, d) for n, k, s, p, d in zip(x[-rank:], *geometry))
    window = math.prod(kernel)
    return math.prod(x[:-rank]) * out + out * window + rank * window


_WINDOWED = ("max_pool", "avg_pool", "smooth_max_pool")
OUTPUT_ESTIMATES: dict[str, Callable[[Shapes, dict], int | None]] = {
    "matmul": _matmul, "linear": _linear, "gather": _gather,
    "scaled_dot_product_attention": _attention, "attention_heads": _attention_heads,
    "conv": _conv(conv_extent, transposed=False),
    "conv_transpose": _conv(transpose_extent, transposed=True),
    **dict.fromkeys(_WINDOWED, _pool),
}


def output_elements(op_label: str, input_shapes: Shapes, params: dict) -> tuple[str, int] | None:
    """(what, elements) of the op's output where it can outgrow the inputs, else None."""
    estimate = OUTPUT_ESTIMATES.get(op_label)
    elements = None if estimate is None else estimate(input_shapes, params)
    what = "output and window tables" if op_label in _WINDOWED else "output"
    return None if elements is None else (f"the {what} of {op_label}", elements)
