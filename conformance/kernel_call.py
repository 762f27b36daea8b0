"""Calling the kernel under audit: on its device, on copies of the case's arrays, with allocation
poisoning on (engine.runtime.poison), and comparing every array it was handed, bit for bit,
after the call. A kernel that writes into its inputs (or, for a VJP, into the output or the
cotangent it is given) fails with its own reason; output elements still holding the poison bits
were never written."""
from __future__ import annotations

from contextlib import ExitStack, contextmanager, nullcontext

import numpy as np

from conformance import misalign
from conformance.failures import Failure, hex32
from conformance.vjp import HarnessStepError
from engine.tape_saves import stand_ins
from engine.types import Device

INPUT_MUTATED = "input-mutated"


class KernelRaised(Exception):
    """The kernel under audit raised (a finding about the kernel, not the harness)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.exc = exc


@contextmanager
def _harness(where: str):
    """Harness code (copies, poisoning, comparisons): its exception is a HarnessStepError."""
    try:
        yield
    except (HarnessStepError, KernelRaised):
        raise
    except Exception as exc:
        raise HarnessStepError(where, exc) from exc


@contextmanager
def _kernel():
    """The kernel's own call (and reading its result back): its exception is KernelRaised."""
    try:
        yield
    except Exception as exc:
        raise KernelRaised(exc) from exc


def xp_for(device: Device):
    if device is Device.cuda:
        import cupy
        return cupy
    return np


def to_device(x, xp):
    """A fresh copy of a host array on the device (the kernel never sees the case's own arrays),
    bits and dtype kept (the engine's upload, which keeps a rank-0 -0)."""
    if x is None or not isinstance(x, np.ndarray):
        return x
    if xp is np:
        return x.copy()
    from engine.runtime.device_buffer import to_device as upload
    return upload(x, dtype=None)


def upload_inputs(inputs: tuple, xp, offsets: tuple[int, ...] | None) -> list:
    """The kernel's copies of the inputs: fresh aligned ones, or with `offsets` (one per input)
    views at those byte offsets from aligned allocations (conformance/misalign.py)."""
    if offsets is None:
        return [to_device(x, xp) for x in inputs]
    return [misalign.upload(x, xp, off) for x, off in zip(inputs, offsets, strict=True)]


def to_host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _poisoning(on: bool):
    if not on:
        return nullcontext()
    from engine.runtime.poison import poisoned
    return poisoned()


def poison_mask(array) -> np.ndarray:
    """True where a host float32 array holds the allocator's poison bits."""
    from engine.runtime.poison import poison_mask as mask
    return np.asarray(mask(array), dtype=bool)


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """None when equal bit for bit, else a bool mask of the differing elements (shape b's)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return np.ones(b.shape, dtype=bool)
    if a.dtype.kind == "f":
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        diff = a.view(width) != b.view(width)
    else:
        diff = a != b
    return diff if np.any(diff) else None


def mutation_failures(handed: dict, originals: dict, reason: str) -> list[Failure]:
    """One failure per array the call changed: `handed` are the arrays given to the kernel (on
    its device), `originals` the host arrays they were copied from, by the same names."""
    out = []
    for name, original in originals.items():
        diff = _same_bits(to_host(handed[name]), original)
        if diff is None:
            continue
        now = to_host(handed[name])
        idx = tuple(int(i) for i in np.argwhere(diff)[0]) if diff.ndim else ()
        before = original[idx] if original.ndim else original
        after = now[idx] if now.shape == original.shape and now.ndim else now
        fmt = hex32 if original.dtype == np.float32 else repr
        out.append(Failure(
            output=name, element=list(idx), reason=reason, expected=fmt(before),
            expected_value=_num(before), got=fmt(after), got_value=_num(after), exact="",
            error=f"{int(np.count_nonzero(diff))} of {original.size} element(s) of `{name}` "
                  "changed by the call", bound=None, ulps="", inputs={}))
    return out


def _num(x):
    from conformance.failures import num
    try:
        return num(x)
    except (TypeError, ValueError):
        return str(x)


def call_forward(handler, device: Device, inputs: tuple, params: dict, poison: bool,
                 offsets: tuple[int, ...] | None = None):
    """(host output or the raw return value, mutation failures). The kernel's own exception
    comes out as KernelRaised; the harness's as HarnessStepError. `offsets`: the inputs' byte
    offsets from aligned memory (Case.offsets), or None for aligned copies."""
    with ExitStack() as stack:
        with _harness("upload"):
            xp = xp_for(device)
            handed = {f"input[{i}]": x for i, x in enumerate(upload_inputs(inputs, xp, offsets))}
            dev_params = {k: to_device(v, xp) for k, v in params.items()}
            stack.enter_context(_poisoning(poison))
        with _kernel():
            out = handler.forward(*handed.values(), **dev_params)
            if hasattr(out, "get"):
                out = out.get()
    if isinstance(out, np.generic):   # NumPy returns a scalar for some rank-0 results
        out = np.asarray(out)
    with _harness("input-check"):
        originals = {f"input[{i}]": x for i, x in enumerate(inputs)}
        originals.update({f"param {k}": v for k, v in params.items()
                          if isinstance(v, np.ndarray)})
        handed.update({f"param {k}": v for k, v in dev_params.items()
                       if isinstance(params[k], np.ndarray)})
        return out, mutation_failures(handed, originals, INPUT_MUTATED)


def call_vjp(vjp_fn, device: Device, inputs: tuple, out: np.ndarray, g: np.ndarray,
             params: dict, poison: bool, offsets: tuple[int, ...] | None = None):
    """(host gradients, mutation failures) of a VJP call (inputs, output, grad_out, **params);
    exceptions and `offsets` (the inputs') as call_forward's."""
    with ExitStack() as stack:
        with _harness("vjp-upload"):
            xp = xp_for(device)
            handed_inputs = tuple(upload_inputs(inputs, xp, offsets))
            handed_out, handed_g = to_device(out, xp), to_device(g, xp)
            dev_params = {k: to_device(v, xp) for k, v in params.items()}
            stack.enter_context(_poisoning(poison))
        # The rule gets what the tape would give it: Unsaved for the values its @saves
        # declaration leaves out, so a rule reading more than it declares fails here.
        rule_inputs, rule_out = stand_ins(vjp_fn, handed_inputs, handed_out)
        with _kernel():
            grads = vjp_fn(rule_inputs, rule_out, handed_g, **dev_params)
            if isinstance(grads, (tuple, list)):
                grads = tuple(None if x is None else to_host(x) for x in grads)
            elif grads is not None:
                grads = (to_host(grads),)
    with _harness("vjp-input-check"):
        handed = {f"input[{i}]": x for i, x in enumerate(handed_inputs)}
        handed.update({"output": handed_out, "grad_out": handed_g})
        originals = {f"input[{i}]": x for i, x in enumerate(inputs)}
        originals.update({"output": out, "grad_out": g})
        for k, v in params.items():
            if isinstance(v, np.ndarray):
                handed[f"param {k}"], originals[f"param {k}"] = dev_params[k], v
        return grads, mutation_failures(handed, originals, "vjp-" + INPUT_MUTATED)
