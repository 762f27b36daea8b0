"""The kernel's side of a call: fresh device copies of the case's arrays (at a byte offset when the
case asks for misaligned views), allocation poisoning around the call, the call itself, and the
handed arrays read back to the host afterwards so the judge can compare them bit for bit.

This module runs inside the kernel process (and in-process for the harness's own unit tests): it
imports the engine and NumPy/CuPy but nothing of the judge (references, bounds, comparisons).
"""
from __future__ import annotations

import os
import traceback
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from engine.types import Device

FRAMES_KEPT = 8          # frames of a kernel's traceback kept: its outermost two, its innermost
FRAME_CHARS = 240        # characters of one frame's line kept
_REPO = Path(__file__).resolve().parents[2]
# The harness's plumbing around a kernel call: never the kernel's own frames. The engine's
# wrappers (a tape rule called through engine.ops) are plumbing too, unless the kernel is the
# engine's own (a built-in capsule), whose frames are all there.
_HARNESS, _ENGINE = str(_REPO / "conformance") + os.sep, str(_REPO / "engine") + os.sep


class KernelRaised(Exception):
    """The kernel under audit raised (a finding about the kernel, not the harness). `frames`
    are the kernel's own frames of its traceback (kernel_frames), innermost last: computed from
    the exception here, or as a kernel process sent them (bounded_frames)."""

    def __init__(self, exc: BaseException | str, frames: list[str] | None = None) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        super().__init__(text)
        self.exc = exc
        self.frames = frames if frames is not None else (
            [] if isinstance(exc, str) else kernel_frames(exc))


def _shown_path(filename: str) -> str:
    """A frame's file, relative to the current directory when it lies below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:   # another drive (Windows)
        return filename
    return filename if rel.startswith("..") else rel


def kernel_frames(exc: BaseException) -> list[str]:
    """`path:line in function: source` for the frames of the kernel's own code in the traceback
    of an exception it raised, innermost last, at most FRAMES_KEPT (the outermost two and the
    innermost rest, the count of those left out between them)."""
    frames = traceback.extract_tb(exc.__traceback__)
    theirs = [f for f in frames if not f.filename.startswith((_HARNESS, _ENGINE))] or \
        [f for f in frames if not f.filename.startswith(_HARNESS)]
    lines = [f"{_shown_path(f.filename)}:{f.lineno} in {f.name}" +
             (f": {f.line.strip()}" if f.line else "") for f in theirs]
    if len(lines) > FRAMES_KEPT:
        left_out = len(lines) - FRAMES_KEPT
        lines = lines[:2] + [f"... {left_out} frame(s) left out ..."] + \
            lines[-(FRAMES_KEPT - 2):]
    return bounded_frames(lines)


def bounded_frames(value) -> list[str]:
    """A kernel's frames as the judge keeps them: what a kernel process sent is untrusted text,
    so anything but a list of strings is dropped, at most FRAMES_KEPT + 1 lines of at most
    FRAME_CHARS characters are kept, and characters a terminal would act on are escaped."""
    if not isinstance(value, list):
        return []
    kept = [v for v in value if isinstance(v, str)][:FRAMES_KEPT + 1]
    return ["".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                    for c in v[:FRAME_CHARS]) for v in kept]


class KernelSideError(Exception):
    """The kernel process's own steps (upload, poisoning, read-back) raised: `where` names the
    step. Reported to the judge as a harness error of that step."""

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"{where}: {type(exc).__name__}: {exc}")
        self.where, self.exc = where, exc


def xp_for(device: Device):
    if device is Device.cuda:
        import cupy
        return cupy
    return np


def to_device(x, xp, offset_bytes: int = 0):
    """A fresh copy of a host array on the device (the kernel never sees the case's own arrays),
    bits and dtype kept (the engine's upload, which keeps a rank-0 -0); at `offset_bytes` past an
    aligned allocation when asked (conformance/misalign.py)."""
    if x is None or not isinstance(x, np.ndarray):
        return x
    if offset_bytes:
        from conformance.misalign import upload
        return upload(x, xp, offset_bytes)
    if xp is np:
        return x.copy()
    from engine.runtime.device_buffer import to_device as upload_aligned
    return upload_aligned(x, dtype=None)


def to_host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def poisoning(on: bool, xp):
    """Poisoned allocations for one call: host arrays always, device blocks only for a kernel
    on the GPU. Named, not left to poisoned()'s "wherever CUDA is available": that would start
    a CUDA context (and its driver's descriptors) in the process of every CPU kernel on a GPU
    machine, which a CPU capsule never needs."""
    if not on:
        return nullcontext()
    from engine.runtime.poison import poisoned
    return poisoned(device=xp is not np)


class Returned:
    """What a kernel returned when it is not an array: its description, in words."""

    def __init__(self, description: str) -> None:
        self.description = description

    def __repr__(self) -> str:
        return f"Returned({self.description!r})"


def describe_returned(out) -> str:
    if out is None:
        return "None"
    if isinstance(out, np.ndarray):
        return f"a {out.dtype} array of shape {list(out.shape)}"
    return f"a {type(out).__name__}"


def _step(where: str, fn):
    try:
        return fn()
    except (KernelRaised, KernelSideError):
        raise
    except Exception as exc:
        raise KernelSideError(where, exc) from exc


def _offset(offsets, i: int) -> int:
    return int(offsets[i]) if offsets is not None else 0


def _check_offsets(offsets, inputs) -> None:
    if offsets is not None and len(offsets) != len(inputs):
        raise ValueError(f"{len(offsets)} offset(s) for {len(inputs)} input(s): a misaligned "
                         "case gives one byte offset per input")


def run_forward(forward, device: Device, inputs: tuple, params: dict, poison: bool,
                offsets=None):
    """(host output, or the raw return value when it is no array; the handed arrays after the
    call, on the host, by name: `input[i]` and `param k` for array params)."""
    xp = _step("upload", lambda: xp_for(device))
    _step("upload", lambda: _check_offsets(offsets, inputs))
    handed = _step("upload", lambda: {f"input[{i}]": to_device(x, xp, _offset(offsets, i))
                                      for i, x in enumerate(inputs)})
    dev_params = _step("upload", lambda: {k: to_device(v, xp) for k, v in params.items()})
    with _step("poison", lambda: poisoning(poison, xp)):
        try:
            out = forward(*handed.values(), **dev_params)
            if hasattr(out, "get"):
                out = out.get()
        except Exception as exc:
            raise KernelRaised(exc) from exc
    if isinstance(out, np.generic):   # NumPy returns a scalar for some rank-0 results
        out = np.asarray(out)
    handed.update({f"param {k}": v for k, v in dev_params.items()
                   if isinstance(params[k], np.ndarray)})
    return out, _step("read-back", lambda: {k: to_host(v) for k, v in handed.items()})


def vjp_callable(capsule, handler):
    """The VJP that owns this capsule's gradients (backend or local tape rule), or None."""
    from engine.capsule import ExecutableKernel
    from engine.ops import vjp_function
    from engine.types import VJPMode
    if not capsule.op.needs_vjp or capsule.vjp_mode is VJPMode.none:
        return None
    if capsule.vjp_mode is VJPMode.backend_vjp and handler.vjp is None:
        return None
    return vjp_function(ExecutableKernel(capsule, handler))


def run_vjp(vjp_fn, device: Device, inputs: tuple, out, g, params: dict, poison: bool,
            offsets=None):
    """(host gradients: a tuple with None where the rule gives none, or a Returned; the handed
    arrays after the call, by name: `input[i]`, `output`, `grad_out`, `param k`)."""
    from engine.tape_saves import stand_ins
    xp = _step("vjp-upload", lambda: xp_for(device))
    _step("vjp-upload", lambda: _check_offsets(offsets, inputs))
    handed_inputs = _step("vjp-upload", lambda: tuple(
        to_device(x, xp, _offset(offsets, i)) for i, x in enumerate(inputs)))
    handed_out, handed_g = _step("vjp-upload", lambda: (to_device(out, xp), to_device(g, xp)))
    dev_params = _step("vjp-upload", lambda: {k: to_device(v, xp) for k, v in params.items()})
    with _step("vjp-poison", lambda: poisoning(poison, xp)):
        # The rule gets what the tape would give it: Unsaved for the values its @saves
        # declaration leaves out, so a rule reading more than it declares fails here.
        rule_inputs, rule_out = stand_ins(vjp_fn, handed_inputs, handed_out)
        try:
            grads = vjp_fn(rule_inputs, rule_out, handed_g, **dev_params)
            if isinstance(grads, (tuple, list)):
                grads = tuple(None if x is None else to_host(x) for x in grads)
            elif grads is not None:
                grads = (to_host(grads),)
        except Exception as exc:
            raise KernelRaised(exc) from exc
    handed = {f"input[{i}]": x for i, x in enumerate(handed_inputs)}
    handed.update({"output": handed_out, "grad_out": handed_g})
    handed.update({f"param {k}": v for k, v in dev_params.items()
                   if isinstance(params[k], np.ndarray)})
    return grads, _step("vjp-read-back", lambda: {k: to_host(v) for k, v in handed.items()})
