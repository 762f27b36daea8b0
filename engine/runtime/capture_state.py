"""What the op dispatcher tells engine/graphs.py while a step is warmed up or captured. A module
of its own, importing nothing, so the dispatcher and the tape reach it without import cycles.

`recording`: the warm-up or the capture of a step runs, so each op notes itself (the capsules a
graph's key holds, and the op an error inside a capture names); `active`: the capture itself runs
(kernels are recorded, not executed). One state per process: the engine's ops run on the caller's
thread, and one capture runs at a time."""
from __future__ import annotations

START = "the step (before its first op)"


class CaptureState:
    recording = False
    active = False
    op = START
    ops: dict = {}     # BackendOp -> capsule name, in first-use order


CAPTURE = CaptureState()


def note_op(op, capsule: str) -> None:
    CAPTURE.op = op.label
    CAPTURE.ops.setdefault(op, capsule)


def note_vjp(label: str) -> None:
    CAPTURE.op = f"{label} (VJP)"
