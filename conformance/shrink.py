"""Shrinking a failing case to a minimal one (smaller shape, simpler values, still failing for the
same reason). The replay files a shrunk case is written to are conformance/replay.py's."""
from __future__ import annotations

from typing import Callable

import numpy as np

from conformance import op_db
from conformance.generators import Case
# The replay file's I/O moved to replay.py; its names stay importable from here (the worker and
# older callers import them from shrink).
from conformance.replay import (REPLAY_FORMAT, ReplayError, decode_case,  # noqa: F401
                                encode_case, read_replay, write_replay)
from engine.types import BackendOp as Op, RuntimeEntry as Entry

F32 = np.float32


# --- candidates ---------------------------------------------------------------------------------

def _focus(case: Case, element: list[int], output: str = "value") -> Case | None:
    """The failing element's own inputs, as a smaller case of the same op (what the element reads
    is the focus of the op's record, op_db.FOCI)."""
    spec = op_db.OP_SPECS.get(case.op)
    focus = _FOCUS.get(spec.focus if spec else None)
    return None if focus is None else focus(case, tuple(element), output)


def _focus_elementwise(case: Case, idx: tuple, output: str) -> Case | None:
    """Element idx of every input, as 1-element inputs."""
    g = case.cotangent
    if not idx:
        return None
    return Case(case.op, case.cls, tuple(np.array(a[idx], F32).reshape(1) for a in case.inputs),
                dict(case.params), None if g is None else np.array(g[idx], F32).reshape(1),
                case.seed, case.index)


def _focus_row(case: Case, idx: tuple, output: str) -> Case | None:
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
    return Case(case.op, case.cls, (np.array(case.inputs[0][tuple(sel)], F32),), p,
                None if g is None else np.array(g[tuple(sel)], F32), case.seed, case.index)


def _focus_reduced(case: Case, idx: tuple, output: str) -> Case | None:
    """The terms the output element sums, as a 1-D reduction."""
    p, g = case.params, case.cotangent
    a = case.inputs[0]
    axes = p.get("axes")
    red = set(range(a.ndim)) if axes is None else {x % a.ndim for x in axes}
    it, sel = iter(idx), []
    for d in range(a.ndim):
        if d in red:
            sel.append(slice(None))
            if p.get("keepdims"):
                next(it, None)
        else:
            sel.append(next(it, 0))
    terms = np.array(a[tuple(sel)], F32).reshape(-1)
    return Case(case.op, case.cls, (terms,), {"axes": (0,), "keepdims": False},
                None if g is None else np.array(g[idx], F32).reshape(()), case.seed,
                case.index)


def _focus_dot(case: Case, idx: tuple, output: str) -> Case | None:
    """The row of a and the column of b of the output element, as a 1 x 1 product."""
    p, g = case.params, case.cotangent
    if len(idx) < 2:
        return None
    a, b = case.inputs
    a2 = np.swapaxes(a, -1, -2) if p.get("trans_a") else a
    b2 = np.swapaxes(b, -1, -2) if p.get("trans_b") else b
    *batch, i, j = idx
    row = np.array(a2[tuple(batch) + (i, slice(None))], F32).reshape(1, -1)
    col = np.array(b2[tuple(batch) + (slice(None), j)], F32).reshape(-1, 1)
    return Case(case.op, case.cls, (row, col), {"trans_a": False, "trans_b": False},
                None if g is None else np.array(g[idx], F32).reshape(1, 1), case.seed,
                case.index)


def _focus_group(case: Case, idx: tuple, output: str) -> Case | None:
    """layer_norm: the failing element's row (value, dx); batch_norm: its channel (any output);
    attention: its query row (value, dq) or its batch entry (dk, dv); add_layer_norm: the row of
    x and r (either half of the value, dx, dr). dgamma and dbeta of layer_norm read every row: no
    smaller case."""
    op, p, g = case.op, dict(case.params), case.cotangent
    if not idx:
        return None
    per_element = output in ("value", "grad[0]")
    if op is Op.layer_norm:
        x, gamma, beta = case.inputs
        if not per_element or x.ndim < 2:
            return None
        row = tuple(idx[:-1])
        return Case(op, case.cls, (np.array(x[row], F32), gamma, beta), p,
                    None if g is None else np.array(g[row], F32), case.seed, case.index)
    if op is Entry.add_layer_norm:
        x, r, gamma, beta = case.inputs
        if output not in ("value", "grad[0]", "grad[1]") or x.ndim < 2:
            return None
        row = tuple(idx[1:-1]) if output == "value" else tuple(idx[:-1])   # value: [2, ..., d]
        return Case(op, case.cls, (np.array(x[row], F32), np.array(r[row], F32), gamma, beta), p,
                    None if g is None else np.array(g[(slice(None),) + row], F32), case.seed,
                    case.index)
    if op is Op.batch_norm:
        x, gamma, beta = case.inputs
        c = idx[1] if per_element else idx[0]
        if x.shape[1] < 2:
            return None
        sl = slice(c, c + 1)
        return Case(op, case.cls, (np.array(x[:, sl], F32), np.array(gamma[sl], F32),
                                   np.array(beta[sl], F32)), p,
                    None if g is None else np.array(g[:, sl], F32), case.seed, case.index)
    q, k, v = case.inputs
    mask = p.get("mask")
    if q.ndim == 3:
        b = slice(idx[0], idx[0] + 1)
        sel_q = (b, slice(idx[1], idx[1] + 1)) if per_element else (b,)
        sel_kv = (b,)
    elif per_element:
        sel_q, sel_kv = (slice(idx[0], idx[0] + 1),), ()
    else:
        return None
    if mask is not None:
        p["mask"] = np.array(np.asarray(mask)[sel_q], dtype=bool)
    return Case(op, case.cls, (np.array(q[sel_q], F32), np.array(k[sel_kv], F32),
                               np.array(v[sel_kv], F32)), p,
                None if g is None else np.array(g[sel_q], F32), case.seed, case.index)


# focus kind (op_db.FOCI) -> the smaller case; LOSS and no focus keep the case whole
_FOCUS = {op_db.ELEMENTWISE: _focus_elementwise, op_db.ROW: _focus_row,
          op_db.REDUCED: _focus_reduced, op_db.DOT: _focus_dot, op_db.GROUP: _focus_group}


def _halves(case: Case):
    """Drop half of the terms of a 1-D reduction, a row, or a single dot product (ops whose
    record is `halvable`)."""
    op = case.op
    spec = op_db.OP_SPECS.get(op)
    if spec is None or not spec.halvable:
        return
    if spec.focus in (op_db.REDUCED, op_db.ROW) and \
            case.inputs[0].ndim == 1 and case.inputs[0].size > 1:
        a, n = case.inputs[0], case.inputs[0].size
        g = case.cotangent
        for s in (slice(0, n // 2), slice(n // 2, n)):
            # a reduction's cotangent is the one scalar's; a row's is halved with it
            gs = g if g is None or spec.focus == op_db.REDUCED else g[s]
            yield Case(op, case.cls, (np.array(a[s], F32),), dict(case.params), gs, case.seed,
                       case.index)
    if spec.focus == op_db.DOT and case.inputs[0].shape[0] == 1 and case.inputs[0].shape[-1] > 1:
        a, b = case.inputs
        k = a.shape[-1]
        for s in (slice(0, k // 2), slice(k // 2, k)):
            yield Case(op, case.cls, (np.array(a[:, s], F32), np.array(b[s, :], F32)),
                       dict(case.params), case.cotangent, case.seed, case.index)


def _simpler_values(case: Case, limit: int = 24):
    """Each of the first elements replaced by 0, then by 1 (one change per candidate)."""
    for i, a in enumerate(case.inputs):
        flat = a.reshape(-1)
        for j in range(min(flat.size, limit)):
            for simple in (F32(0.0), F32(1.0)):
                if flat[j] == simple and np.signbit(flat[j]) == np.signbit(simple):
                    continue
                new = flat.copy()
                new[j] = simple
                inputs = list(case.inputs)
                inputs[i] = new.reshape(a.shape)
                yield Case(case.op, case.cls, tuple(inputs), dict(case.params), case.cotangent,
                           case.seed, case.index)


def shrink(case: Case, still_fails: Callable[[Case], list | None], budget: int = 60) -> Case:
    """Greedy shrinking: take the first candidate that still fails, until none does or the
    budget of predicate calls is spent. `still_fails(case)` returns the failures or None."""
    if case.offsets is not None:      # a misaligned case's candidates stay misaligned
        still_fails = _at_offsets(still_fails, case.offsets)
    current, failures = case, still_fails(case)
    if not failures:
        return case
    calls = 1
    first = next((f for f in failures if f.element), None)
    if first is not None:
        focused = _focus(current, first.element, first.output)
        if focused is not None:
            calls += 1
            got = still_fails(focused)
            if got:
                current, failures = focused, got
    progress = True
    while progress and calls < budget:
        progress = False
        for cand in _halves(current):
            calls += 1
            got = still_fails(cand)
            if got:
                current, failures, progress = cand, got, True
                break
            if calls >= budget:
                break
    for cand in _simpler_values(current):
        if calls >= budget:
            break
        calls += 1
        got = still_fails(cand)
        if got:
            current = cand
    current.note = f"shrunk from {case.cls}[{case.index}] in {calls} evaluations" + (
        f"; {case.note}" if case.note else "")     # e.g. that it was a sibling
    return current


def _at_offsets(still_fails, offsets: tuple[int, ...]):
    """The predicate with each candidate (built without offsets) given the case's offsets, in
    turn over its inputs."""
    def check(c: Case):
        if c.offsets is None:
            c.offsets = tuple(offsets[i % len(offsets)] for i in range(len(c.inputs)))
        return still_fails(c)
    return check
