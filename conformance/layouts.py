"""Shape and parameter layouts: layout(rng, cls) -> (input shapes, params) as `engine.ops.<op>` takes
them, for generator class `cls` ("shapes" asks for edge extents, "empty" for an empty axis,
"params", "masks" and "indices" for the op's own extra classes). Each op's record holds its layout
(OpSpec.layout, in conformance/families/<family>.py); here are the pieces several families share
and the layouts of the plain unary and binary ops. generators.py draws the values into the shapes.

Axis parameters: wherever the op takes an axis, about a third of the drawn axes are negative and
about a third of the multi-axis reduce tuples are unsorted (OPS.md allows both; never a repeated
axis, never a bare int where OPS.md asks for a tuple)."""
from __future__ import annotations

from conformance.samplers import edge_shape, empty_shape, small_shape


def base_shape(rng, cls, rank_lo=0):
    """A shape of rank rank_lo or more for class `cls`: edge extents, an empty axis, or small."""
    if cls == "shapes":
        return edge_shape(rng, rank_lo)
    if cls == "empty":
        return empty_shape(rng, max(rank_lo, 1))
    if cls in ("normal", "cancellation"):
        return small_shape(rng, int(rng.integers(rank_lo, 5)), 1, 9)
    return small_shape(rng, int(rng.integers(max(rank_lo, 1), 3)), 4, 12)


def unary_layout(rng, cls):
    return [base_shape(rng, cls)], {}


def binary_layout(rng, cls):
    s = base_shape(rng, cls)
    return [s, s], {}


NEGATIVE_SHARE = 1 / 3          # of drawn axes written as negative (OPS.md allows them)
UNSORTED_SHARE = 1 / 3          # of drawn multi-axis tuples given out of ascending order


def signed_axis(rng, ax: int, nd: int) -> int:
    """Axis `ax` (in range(nd)) written as ax - nd a third of the time."""
    return int(ax) - nd if rng.random() < NEGATIVE_SHARE else int(ax)


def factor(rng, n: int, rank: int) -> tuple[int, ...]:
    """A shape of `rank` axes whose extents multiply to n (reshape targets, norm groups)."""
    dims = []
    for _ in range(max(rank - 1, 0)):
        divs = [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1, 2]
        d = int(rng.choice(divs))
        dims.append(d)
        n = n // d if d else n
    return tuple(dims + [n]) if rank else ()


# the query, key and head extents of the attention layouts (attention, attention_heads)
ATTENTION_EXTENTS = (1, 3, 16, 33)
