"""Default layouts and edge sets from an op's signature, for the records of ops the engine does not
have (a user's contract, docs/PLUGINS.md): the inputs' axes by name (an axis named twice has one
extent), the axes whose extents must be multiples, and fixed parameters. A record may still bring
its own layout and edges; these are what it gets from `Signature.layout` and `Signature.edges`.

The layout draws, per generator class: "shapes", the last axis of input 0 at an edge extent (warp
and block boundaries) and the others 1 to 3; "empty", one axis 0; "normal" and "cancellation",
every axis 1 to 8; the other classes 2 to 12. The edge set puts the last axis of input 0 at each
of SIGNATURE_EXTENTS (or `edge_axis`; the other axes cycling 1, 2, 3), then each axis at 0
once."""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance.edges import NORMAL, Edge
from conformance.samplers import EDGE_EXTENTS

SIGNATURE_EXTENTS = (1, 7, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097)


@dataclass(frozen=True)
class Signature:
    """An op's array inputs as (name, axis names), e.g. (("x", ("rows", "d")), ("w", ("d",)))."""
    # the array inputs in the op's order: (name, axis names)
    inputs: tuple
    # axis name -> the multiple its extent must be (rotary embeddings pair the last axis)
    multiples: dict = field(default_factory=dict)
    # parameters passed to every call, as `engine.ops`' keywords would be
    params: dict = field(default_factory=dict)
    # how the edge set's arrays are filled (edges.py's fill kinds)
    fill: str = NORMAL
    # the axis the edge set runs through SIGNATURE_EXTENTS (default: input 0's last)
    edge_axis: str = ""

    def axes(self) -> tuple[str, ...]:
        """Every axis name, in order of first appearance."""
        return tuple(dict.fromkeys(a for _, names in self.inputs for a in names))

    def _fit(self, axis: str, extent: int) -> int:
        m = int(self.multiples.get(axis, 1))
        return -(-extent // m) * m

    def shapes(self, extents: dict) -> list[tuple[int, ...]]:
        return [tuple(extents[a] for a in names) for _, names in self.inputs]

    def layout(self):
        """(rng, cls) -> (input shapes, params)."""
        axes = self.axes()
        last = self.inputs[0][1][-1]

        def draw(rng, cls):
            if cls == "shapes":
                ext = {a: int(rng.integers(1, 4)) for a in axes}
                ext[last] = int(rng.choice(EDGE_EXTENTS))
            elif cls == "empty":
                ext = {a: int(rng.integers(1, 4)) for a in axes}
                ext[axes[int(rng.integers(0, len(axes)))]] = 0
            elif cls in ("normal", "cancellation"):
                ext = {a: int(rng.integers(1, 9)) for a in axes}
            else:
                ext = {a: int(rng.integers(2, 13)) for a in axes}
            ext = {a: self._fit(a, e) for a, e in ext.items()}
            return self.shapes(ext), dict(self.params)
        return draw

    def edges(self):
        """() -> the fixed edge cases."""
        axes = self.axes()
        last = self.edge_axis or self.inputs[0][1][-1]
        params = tuple(self.params.items())

        def build() -> list[Edge]:
            out = []
            for i, n in enumerate(SIGNATURE_EXTENTS):
                ext = {a: 1 + (i + j) % 3 for j, a in enumerate(axes)}
                ext[last] = n
                ext = {a: self._fit(a, e) for a, e in ext.items()}
                out.append(Edge(tuple(self.shapes(ext)), params, self.fill))
            for a in axes:
                ext = {b: self._fit(b, 2) for b in axes}
                ext[a] = 0
                out.append(Edge(tuple(self.shapes(ext)), params, self.fill))
            return out
        return build
