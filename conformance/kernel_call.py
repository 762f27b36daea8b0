"""Calling the kernel under audit: on its device, on copies of the case's arrays, with allocation
poisoning on (engine.runtime.poison), and comparing every array it was handed, bit for bit,
after the call. A kernel that writes into its inputs (or, for a VJP, into the output or the
cotangent it is given) fails with its own reason; output elements still holding the poison bits
were never written."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from conformance.failures import Failure, hex32
from conformance.isolation.kernel_side import (KernelRaised, KernelSideError, Returned,  # noqa: F401
                                               describe_returned, run_forward, run_vjp, to_device,
                                               to_host, xp_for)
from conformance.vjp import HarnessStepError
from engine.types import Device

INPUT_MUTATED = "input-mutated"


@contextmanager
def _harness(where: str):
    """Harness code (comparisons): its exception is a HarnessStepError."""
    try:
        yield
    except (HarnessStepError, KernelRaised):
        raise
    except Exception as exc:
        raise HarnessStepError(where, exc) from exc


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
        now = handed[name]
        if not isinstance(now, np.ndarray) or now.shape != original.shape \
                or now.dtype != original.dtype:
            what = now.description if isinstance(now, Returned) else describe_returned(now)
            out.append(Failure(
                output=name, element=[], reason=reason, expected=describe_returned(original),
                expected_value="", got=f"{what} after the call", got_value="", exact="",
                error=f"`{name}` did not come back as it was handed", bound=None, ulps="",
                inputs={}))
            continue
        diff = _same_bits(now, original)
        if diff is None:
            continue
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


def _in_process(where: str, fn):
    """A kernel-side step run in this process (the harness's own unit tests): its own failure
    is a HarnessStepError of that step, the kernel's exception stays KernelRaised."""
    try:
        return fn()
    except KernelSideError as exc:
        raise HarnessStepError(exc.where, exc.exc) from exc


def call_forward(handler, device: Device, inputs: tuple, params: dict, poison: bool,
                 offsets=None):
    """(host output or the raw return value, mutation failures). The kernel's own exception
    comes out as KernelRaised; the harness's as HarnessStepError. A RemoteHandler runs the call
    in its kernel process; any other handler runs here."""
    from conformance.isolation.remote import RemoteHandler
    if isinstance(handler, RemoteHandler):
        out, handed = handler.call_forward(inputs, params, poison, offsets)
    else:
        out, handed = _in_process("upload", lambda: run_forward(
            handler.forward, device, inputs, params, poison, offsets))
    with _harness("input-check"):
        originals = {f"input[{i}]": x for i, x in enumerate(inputs)}
        originals.update({f"param {k}": v for k, v in params.items()
                          if isinstance(v, np.ndarray)})
        return out, mutation_failures(_complete(handed, originals), originals, INPUT_MUTATED)


def _complete(handed: dict, originals: dict) -> dict:
    """The handed arrays by name; one a kernel process left out counts as changed (a Returned
    stands for it, which no original equals)."""
    return {k: handed.get(k, Returned("nothing")) for k in originals}


def call_vjp(vjp_fn, device: Device, inputs: tuple, out: np.ndarray, g: np.ndarray,
             params: dict, poison: bool, offsets=None):
    """(host gradients, mutation failures) of a VJP call (inputs, output, grad_out, **params);
    exceptions as call_forward's."""
    from conformance.isolation.remote import RemoteVJP
    if isinstance(vjp_fn, RemoteVJP):
        grads, handed = vjp_fn.call(inputs, out, g, params, poison, offsets)
    else:
        grads, handed = _in_process("vjp-upload", lambda: run_vjp(
            vjp_fn, device, inputs, out, g, params, poison, offsets))
    with _harness("vjp-input-check"):
        originals = {f"input[{i}]": x for i, x in enumerate(inputs)}
        originals.update({"output": out, "grad_out": g})
        originals.update({f"param {k}": v for k, v in params.items()
                          if isinstance(v, np.ndarray)})
        return grads, mutation_failures(_complete(handed, originals), originals,
                                        "vjp-" + INPUT_MUTATED)
