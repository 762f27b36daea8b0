"""Shrinking a failing case to a minimal one (smaller shape, simpler values, still failing for the
same reason). The replay files a shrunk case is written to are conformance/replay.py's."""
from __future__ import annotations

from typing import Callable

import numpy as np

from conformance.families import OP_SPECS
from conformance.generators import Case
# The replay file's I/O moved to replay.py; its names stay importable from here (the worker and
# older callers import them from shrink).
from conformance.replay import (REPLAY_FORMAT, ReplayError, decode_case,  # noqa: F401
                                encode_case, read_replay, write_replay)

F32 = np.float32


# --- candidates ---------------------------------------------------------------------------------

def _focus(case: Case, element: list[int], output: str = "value") -> Case | None:
    """The failing element's own inputs, as a smaller case of the same op (what the element reads
    is the focus of the op's record, conformance/focus.py)."""
    spec = OP_SPECS.get(case.op)
    focus = spec.focus if spec else None
    if focus is None or focus.smaller is None:
        return None
    return focus.smaller(case, tuple(element), output)


def _halves(case: Case):
    """Drop half of the terms of a 1-D reduction, a row, or a single dot product (ops whose
    record is `halvable`: its focus says how)."""
    spec = OP_SPECS.get(case.op)
    if spec is None or not spec.halvable or spec.focus is None or spec.focus.halves is None:
        return
    yield from spec.focus.halves(case)


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
        case.note = _noted("not shrunk: the case did not fail again when judged a second time",
                           case)
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
    simplified = 0
    for cand in _simpler_values(current):
        if calls >= budget:
            break
        calls += 1
        got = still_fails(cand)
        if got:
            current, simplified = cand, simplified + 1
    current.note = _noted(_shrink_note(case, current, calls, budget, simplified), case)
    return current


def _shrink_note(case: Case, final: Case, calls: int, budget: int, simplified: int) -> str:
    """What shrinking did, in words: "shrunk" only when the case got smaller (fewer input
    elements); a case of the same size is "not shrunk", with why and what changed in it."""
    if final.elements < case.elements:
        return f"shrunk from {case.cls}[{case.index}] in {_evaluations(calls)}"
    why = (f"not shrunk: no smaller case still failed for the same reason within "
           f"{_evaluations(calls)}" + ("; the budget ran out" if calls >= budget else ""))
    return why + (f"; {simplified} value(s) simplified to 0 or 1" if simplified else "")


def _evaluations(n: int) -> str:
    return f"{n} evaluation" + ("" if n == 1 else "s")


def _noted(note: str, case: Case) -> str:
    """The shrinker's note, then the case's own (e.g. that it was a sibling)."""
    return note + (f"; {case.note}" if case.note else "")


def _at_offsets(still_fails, offsets: tuple[int, ...]):
    """The predicate with each candidate (built without offsets) given the case's offsets, in
    turn over its inputs."""
    def check(c: Case):
        if c.offsets is None:
            c.offsets = tuple(offsets[i % len(offsets)] for i in range(len(c.inputs)))
        return still_fails(c)
    return check
