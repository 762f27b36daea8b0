"""A failure names the element, its inputs (hex), expected, got, error and bound; this module builds
those records from a Verdict and finds which inputs an output element reads."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from conformance.error_models import REASONS, Verdict
from conformance.families import OP_SPECS

MAX_INPUTS_SHOWN = 16


def hex32(x) -> str:
    """The float32 bit pattern, e.g. 0x3f800000 for 1.0."""
    return f"0x{int(np.asarray(x, dtype=np.float32).view(np.uint32)):08x}"


def num(x) -> float | str:
    """A JSON-safe number: inf and nan as strings."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


@dataclass
class Failure:
    output: str              # "value" or "grad[i]"
    element: list[int]       # the multi-index in the output
    reason: str
    expected: str            # hex of the rounded reference
    expected_value: float | str
    got: str
    got_value: float | str
    exact: float | str       # float64 nearest the exact result
    error: float | str       # |got - exact|
    bound: float | str | None
    ulps: float | str
    inputs: dict             # input name -> list of hex (the elements this output reads)
    # a kernel that raised: its own frames, `path:line in function: source`, innermost last
    # (conformance/isolation/kernel_side.py kernel_frames); None for every other failure
    kernel_frames: list[str] | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        if d["kernel_frames"] is None:   # records of other failures keep their old fields
            del d["kernel_frames"]
        return d

    def line(self) -> str:
        if self.expected == "" and not self.element:   # a whole-output finding: its message
            return f"{self.output}: {self.reason}: {self.got}" + (
                f" ({self.error})" if self.error not in ("", None) else "")
        b = "bitwise" if self.bound is None else f"{self.bound}"
        ins = "; ".join(f"{k}=[{', '.join(v)}]" for k, v in self.inputs.items())
        return (f"{self.output}{self.element}: {self.reason}: expected {self.expected} "
                f"({self.expected_value}), got {self.got} ({self.got_value}), error {self.error}, "
                f"bound {b}; inputs {ins}")


def _hexes(values: np.ndarray) -> list[str]:
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    shown = [hex32(v) for v in flat[:MAX_INPUTS_SHOWN]]
    if flat.size > MAX_INPUTS_SHOWN:
        shown.append(f"... {flat.size - MAX_INPUTS_SHOWN} more")
    return shown


def _shown(values: np.ndarray) -> list[str]:
    """Input elements as float32 hex, or a boolean mask's as T and F."""
    values = np.asarray(values)
    if values.dtype == bool:
        return ["T" if m else "F" for m in values.reshape(-1)]
    return _hexes(values)


def element_inputs(op, inputs, params, index: tuple, grad_of: int | None = None) -> dict:
    """The input elements output `index` reads (for a gradient, the element itself and the
    cotangent are what matter: we show the input elements at that index). What a value element
    reads is the focus of the op's record (conformance/focus.py); without one, every input."""
    names = [f"in{i}" for i in range(len(inputs))]
    idx = tuple(int(i) for i in index)
    spec = OP_SPECS.get(op)
    focus = spec.focus if spec else None
    if grad_of is not None:
        if focus is not None and focus.grads_per_element:
            return {n: _hexes(a[idx]) for n, a in zip(names, inputs)}
        a = inputs[grad_of]
        return {names[grad_of]: _hexes(a[idx]) if a.ndim == len(idx) else []}
    if focus is not None and focus.reads is not None:
        return {name: _shown(v) for name, v in focus.reads(inputs, params, idx).items()}
    return {n: _hexes(a) for n, a in zip(names, inputs)}


def failures_from(verdict: Verdict, ref, got, output: str, op, inputs, params,
                  limit: int = 5, grad_of: int | None = None) -> list[Failure]:
    """Up to `limit` failure records, worst ratio first."""
    bad = np.flatnonzero(~verdict.ok.reshape(-1))
    if bad.size == 0:
        return []
    ratio = np.nan_to_num(verdict.ratio.reshape(-1)[bad], nan=np.inf)
    order = bad[np.argsort(-ratio, kind="stable")][:limit]
    shape = verdict.ok.shape
    out = []
    v, g32 = np.asarray(ref.value, np.float32), np.asarray(got, np.float32)
    for flat in order:
        idx = np.unravel_index(flat, shape) if shape else ()
        b = verdict.bound.reshape(-1)[flat]
        out.append(Failure(
            output=output, element=[int(i) for i in idx],
            reason=REASONS[int(verdict.reason.reshape(-1)[flat])],
            expected=hex32(v.reshape(-1)[flat]), expected_value=num(v.reshape(-1)[flat]),
            got=hex32(g32.reshape(-1)[flat]), got_value=num(g32.reshape(-1)[flat]),
            exact=num(np.asarray(ref.exact).reshape(-1)[flat]),
            error=num(verdict.err.reshape(-1)[flat]),
            bound=None if np.isnan(b) else num(b), ulps=num(verdict.ulps.reshape(-1)[flat]),
            inputs=element_inputs(op, inputs, params, idx, grad_of)))
    return out
