"""What a failing output element reads, its focus: an op's record holds one (`OpSpec.focus`), and
shrinking (conformance/shrink.py) and the failure records (conformance/failures.py) call it. The
shared foci are here: ELEMENTWISE (element i of every input), ROW (its row along params["axis"]:
the softmax family), REDUCED (the terms over the reduced axes), DOT (a row of a and a column of
b), LOSS (the value reads everything; a gradient element, that element of each input). An op
whose element reads its own kind of group (a normalisation group, an attention query row)
builds its focus with `group(smaller)` in its family module. No focus (None): shrinking keeps
the case whole and a failure shows every input."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

F32 = np.float32


@dataclass(frozen=True)
class Focus:
    """What one output element of an op reads."""
    # its name in reports and tests: elementwise, row, reduced, dot, group, loss
    name: str
    # (case, element index, output) -> the smaller case of the element's own inputs, or None
    smaller: Callable | None = None
    # case -> the cases with half of its terms (records that are `halvable`), or None
    halves: Callable | None = None
    # (inputs, params, element index) -> {name: the input elements a value element reads}, each
    # an array (a boolean one shows as T/F), or None: every input
    reads: Callable | None = None
    # whether a gradient element reads the same element of every input (else: its own input's)
    grads_per_element: bool = False


# --- shrinking ------------------------------------------------------------------------------------

def smaller_case(case, inputs, params, cotangent):
    """A candidate of shrinking: `case` (generators.Case) with other inputs, params and cotangent,
    no note and fresh aligned inputs (shrink.py puts a misaligned case's offsets back)."""
    return dataclasses.replace(case, inputs=tuple(inputs), params=params, cotangent=cotangent,
                               note="", offsets=None)


def _smaller_elementwise(case, idx: tuple, output: str) -> object | None:
    """Element idx of every input, as 1-element inputs."""
    g = case.cotangent
    if not idx:
        return None
    return smaller_case(case, (np.array(a[idx], F32).reshape(1) for a in case.inputs),
                        dict(case.params), None if g is None else np.array(g[idx], F32).reshape(1))


def _smaller_row(case, idx: tuple, output: str) -> object | None:
    """The element's row along the op's axis (and its mask), as a 1-D case."""
    p, g = dict(case.params), case.cotangent
    if not idx:
        return None
    axis = p.get("axis", -1) % case.inputs[0].ndim
    sel = list(idx)
    sel[axis] = slice(None)
    p["axis"] = 0
    if "mask" in p:
        p["mask"] = np.array(np.asarray(p["mask"])[tuple(sel)], dtype=bool)
    return smaller_case(case, (np.array(case.inputs[0][tuple(sel)], F32),), p,
                        None if g is None else np.array(g[tuple(sel)], F32))


def _reduced_selection(a: np.ndarray, params: dict, idx: tuple) -> tuple:
    """The index of the terms output element idx of a reduction sums."""
    axes = params.get("axes")
    red = set(range(a.ndim)) if axes is None else {x % a.ndim for x in axes}
    it, sel = iter(idx), []
    for d in range(a.ndim):
        if d in red:
            sel.append(slice(None))
            if params.get("keepdims"):
                next(it, None)
        else:
            sel.append(next(it, 0))
    return tuple(sel)


def _smaller_reduced(case, idx: tuple, output: str) -> object | None:
    """The terms the output element sums, as a 1-D reduction."""
    g = case.cotangent
    a = case.inputs[0]
    terms = np.array(a[_reduced_selection(a, case.params, idx)], F32).reshape(-1)
    return smaller_case(case, (terms,), {"axes": (0,), "keepdims": False},
                        None if g is None else np.array(g[idx], F32).reshape(()))


def _dot_operands(inputs, params):
    a, b = inputs
    a2 = np.swapaxes(a, -1, -2) if params.get("trans_a") else a
    b2 = np.swapaxes(b, -1, -2) if params.get("trans_b") else b
    return a2, b2


def _smaller_dot(case, idx: tuple, output: str) -> object | None:
    """The row of a and the column of b of the output element, as a 1 x 1 product."""
    g = case.cotangent
    if len(idx) < 2:
        return None
    a2, b2 = _dot_operands(case.inputs, case.params)
    *batch, i, j = idx
    row = np.array(a2[tuple(batch) + (i, slice(None))], F32).reshape(1, -1)
    col = np.array(b2[tuple(batch) + (slice(None), j)], F32).reshape(-1, 1)
    return smaller_case(case, (row, col), {"trans_a": False, "trans_b": False},
                        None if g is None else np.array(g[idx], F32).reshape(1, 1))


def _halves_1d(reduced: bool):
    """Drop half of the terms of a 1-D reduction or row: a reduction's cotangent is the one
    scalar's, a row's is halved with it."""
    def halves(case):
        if case.inputs[0].ndim == 1 and case.inputs[0].size > 1:
            a, n = case.inputs[0], case.inputs[0].size
            g = case.cotangent
            for s in (slice(0, n // 2), slice(n // 2, n)):
                gs = g if g is None or reduced else g[s]
                yield smaller_case(case, (np.array(a[s], F32),), dict(case.params), gs)
    return halves


def _halves_dot(case):
    """Drop half of the terms of a single dot product (a 1 x k by k x 1 product)."""
    if case.inputs[0].shape[0] == 1 and case.inputs[0].shape[-1] > 1:
        a, b = case.inputs
        k = a.shape[-1]
        for s in (slice(0, k // 2), slice(k // 2, k)):
            yield smaller_case(case, (np.array(a[:, s], F32), np.array(b[s, :], F32)),
                               dict(case.params), case.cotangent)


# --- what a failing value element reads -----------------------------------------------------------

def _reads_elementwise(inputs, params, idx):
    return {f"in{i}": a[idx] for i, a in enumerate(inputs)}


def _reads_reduced(inputs, params, idx):
    a = inputs[0]
    sel, it = [], iter(idx)
    red = set(range(a.ndim)) if params.get("axes") is None else \
        {ax % a.ndim for ax in params["axes"]}
    for d in range(a.ndim):
        if d in red:
            sel.append(slice(None))
            if params.get("keepdims", False):
                next(it, None)
        else:
            sel.append(next(it))
    return {"in0": a[tuple(sel)]}


def _reads_dot(inputs, params, idx):
    a2, b2 = _dot_operands(inputs, params)
    *batch, i, j = idx
    return {"a_row": a2[tuple(batch) + (i, slice(None))],
            "b_col": b2[tuple(batch) + (slice(None), j)]}


def _reads_row(inputs, params, idx):
    a = inputs[0]
    axis = params.get("axis", -1) % a.ndim
    sel = list(idx)
    sel[axis] = slice(None)
    shown = {"row": a[tuple(sel)]}
    if "mask" in params:
        shown["mask"] = np.asarray(params["mask"], dtype=bool)[tuple(sel)]
    return shown


ELEMENTWISE = Focus("elementwise", _smaller_elementwise, reads=_reads_elementwise,
                    grads_per_element=True)
ROW = Focus("row", _smaller_row, _halves_1d(reduced=False), _reads_row)
REDUCED = Focus("reduced", _smaller_reduced, _halves_1d(reduced=True), _reads_reduced)
DOT = Focus("dot", _smaller_dot, _halves_dot, _reads_dot)
LOSS = Focus("loss", grads_per_element=True)
FOCI = (ELEMENTWISE, ROW, REDUCED, DOT, LOSS)


def group(smaller: Callable) -> Focus:
    """The focus of an op whose failing element reads a group of its own (a normalisation group,
    an attention query row or batch entry): `smaller(case, index, output)` builds the group's
    case, or None where no smaller case reads it all."""
    return Focus("group", smaller)
