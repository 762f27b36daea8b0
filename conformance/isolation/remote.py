"""The judge's side of a kernel process: start it, talk to it, bound what it prints, end it and
everything it started. `RemoteHandler` stands in for a KernelHandler in the campaign: its calls
go to the kernel process, and every answer is checked for form before the judge looks at it."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from conformance.isolation import wire
from conformance.isolation.kernel_side import KernelRaised, Returned, bounded_frames

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
OUTPUT_KEPT = 4096            # bytes of a kernel process's output kept from its start and its end
ANSWER_FLOOR = 256 << 20      # array bytes an answer may hold, at least


class KernelProcessError(Exception):
    """The kernel process ended, hung or broke the protocol before answering: a verdict about the
    kernel (`crashed` or `timed-out`), never the harness's."""

    status = "crashed"

    def __init__(self, message: str, output: dict | None = None) -> None:
        super().__init__(message)
        self.output = output or {}


class KernelProcessHung(KernelProcessError):
    status = "timed-out"


class RemoteStepError(Exception):
    """A step of the kernel process's own (upload, poisoning, read-back) raised there."""


class OutputTap:
    """Drains a pipe in a thread, keeping its first and last OUTPUT_KEPT bytes and the count."""

    def __init__(self, stream) -> None:
        self.head, self.tail, self.total = b"", b"", 0
        self._stream = stream
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = self._stream.read1(1 << 16)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            self.total += len(chunk)
            if len(self.head) < OUTPUT_KEPT:
                self.head += chunk[:OUTPUT_KEPT - len(self.head)]
            self.tail = (self.tail + chunk)[-OUTPUT_KEPT:]

    def summary(self, wait_s: float = 0.5) -> dict:
        self._thread.join(wait_s)
        rest = self.total - len(self.head)           # bytes after the head
        tail = self.tail[-rest:] if rest > 0 else b""
        skipped = rest - len(tail)
        text = self.head.decode("utf-8", "replace") + (
            f"\n[... {skipped} bytes not kept ...]\n" if skipped > 0 else "") + \
            tail.decode("utf-8", "replace")
        return {"bytes": self.total, "kept": text}


class KernelProcess:
    """One kernel process for one device and plugin (None: the registry's capsules)."""

    def __init__(self, device: str, plugin: str | None, deterministic: bool = False,
                 env: dict | None = None, forked=None) -> None:
        """A fresh interpreter, or `forked` (prefork.Forked: the judge's own fork, made before
        it read anything of its run) when given; `env` is then the one the fork inherited."""
        self.device, self.plugin, self.deterministic = device, plugin, deterministic
        if forked is not None:
            self.proc, self._to_kernel, self._from_kernel = (forked.proc, forked.to_kernel,
                                                             forked.from_kernel)
        else:
            self._spawn(env)
        self.tap = OutputTap(self.proc.stdout)
        self._reader = wire.Reader(self._from_kernel)
        self.closed = False

    def _spawn(self, env: dict | None) -> None:
        env = dict(os.environ if env is None else env)
        # The kernel process imports from where this process does (its sys.path, which a
        # caller may have extended), the repository and the current directory first.
        paths = [str(REPO_ROOT), os.getcwd()] + [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, paths + [
            env.get("PYTHONPATH")])))
        to_kernel_r, self._to_kernel = os.pipe()
        self._from_kernel, from_kernel_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conformance.isolation.kernel_host", str(to_kernel_r),
                 str(from_kernel_w), str(os.getpid())],
                pass_fds=(to_kernel_r, from_kernel_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)   # terminal signals go to the judge, not the kernel
        finally:
            os.close(to_kernel_r)
            os.close(from_kernel_w)

    # --- the conversation -------------------------------------------------------------------
    def _ended(self, what: str) -> KernelProcessError:
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return KernelProcessError(f"the kernel process {how} {what}", self.tap.summary())

    def request(self, message: dict, budget: int, timeout: float | None = None,
                what: str = "before answering") -> dict:
        self.post(message, what)
        return self.collect(budget, timeout, what)

    def post(self, message: dict, what: str = "before answering") -> None:
        """Send one request without waiting for its answer (collect reads it): the kernel
        process works on it while this process does something else. One answer at a time is
        outstanding; it must be collected before the next request."""
        try:
            wire.send(self._to_kernel, message)
        except (BrokenPipeError, OSError):
            raise self._ended(what) from None

    def collect(self, budget: int, timeout: float | None = None,
                what: str = "before answering") -> dict:
        """The answer to the request posted last (its raise, hang or death as request's)."""
        try:
            return self._reader.receive(budget, timeout)
        except wire.WireTimeout:
            self.proc.kill()
            raise KernelProcessHung(f"the kernel process gave no answer within {timeout:g} s "
                                    f"{what}", self.tap.summary()) from None
        except wire.WireClosed:
            raise self._ended(what) from None
        except wire.WireError as exc:
            self.proc.kill()
            raise KernelProcessError(f"the kernel process broke the wire protocol {what}: {exc}",
                                     self.tap.summary()) from None

    def load(self, names: list[str] | None = None, timeout: float | None = None) -> dict:
        """Name -> {capsule (data), has_vjp, has_declines, fingerprint (plugins)}, or raises
        PluginLoadError with the plugin's own diagnosis."""
        reply = self.request({"op": "load", "plugin": self.plugin, "device": self.device,
                              "deterministic": self.deterministic, "names": names},
                             budget=0, timeout=timeout, what="while loading its capsules")
        if isinstance(reply.get("plugin_error"), str):
            raise PluginLoadError(reply["plugin_error"])
        entries = reply.get("capsules")
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
            raise KernelProcessError("the kernel process answered `load` without a capsule list",
                                     self.tap.summary())
        return {e["name"]: e for e in entries}

    def close(self) -> dict:
        """End the process and everything it started; returns its output summary."""
        if self.closed:
            return self.tap.summary(0)
        self.closed = True
        try:
            wire.send(self._to_kernel, {"op": "quit"})
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        from conformance.isolation.reaper import kill_children
        kill_children()   # forks of the kernel, adopted by this subreaper when it ended
        for fd in (self._to_kernel, self._from_kernel):
            try:
                os.close(fd)
            except OSError:
                pass
        return self.tap.summary()

    def __enter__(self) -> "KernelProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PluginLoadError(Exception):
    """The plugin could not be loaded in its kernel process (its PluginError's message)."""


# --- the stand-in handler -------------------------------------------------------------------------

def _arrays_bytes(*groups) -> int:
    total = 0
    for g in groups:
        for x in (g.values() if isinstance(g, dict) else g):
            if isinstance(x, np.ndarray):
                total += x.nbytes
    return total


def _handed(reply: dict) -> dict:
    handed = reply.get("handed")
    if not isinstance(handed, dict):
        return {}
    return {k: v if isinstance(v, np.ndarray) else Returned(f"a {type(v).__name__}")
            for k, v in handed.items()}


def _check(reply: dict):
    """Raise what the answer says happened in the kernel process, else return it."""
    if isinstance(reply.get("raised"), str):   # its frames are the kernel's untrusted text
        raise KernelRaised(reply["raised"][:4000], frames=bounded_frames(reply.get("frames")))
    err = reply.get("side_error")
    if isinstance(err, dict):
        from conformance.vjp import HarnessStepError
        where = str(err.get("where", "kernel-process"))[:100]
        raise HarnessStepError(where, RemoteStepError(
            f"{str(err.get('error'))[:500]} (in the kernel process)\n"
            f"{str(err.get('traceback'))[-1500:]}"))
    return reply


class RemoteHandler:
    """A KernelHandler look-alike whose calls run in a kernel process."""

    def __init__(self, process: KernelProcess, capsule, has_vjp: bool, has_declines: bool):
        self.process, self.capsule, self.name = process, capsule, capsule.name
        self.op, self.provider, self.device = capsule.op, capsule.provider, capsule.device
        self.forward = None
        self.unavailable = None
        self._has_vjp = has_vjp
        self.vjp = self.vjp_stand_in(capsule)
        self.declines = self._declines if has_declines else None

    def _budget(self, *groups) -> int:
        n = _arrays_bytes(*groups)
        return 2 * n + max(ANSWER_FLOOR, 8 * n)

    def _declines(self, inputs: tuple, params: dict) -> str | None:
        reply = _check(self.process.request(
            {"op": "declines", "name": self.name, "inputs": list(inputs), "params": params},
            budget=0))
        why = reply.get("declined")
        return None if why is None else str(why)[:2000]

    def call_forward(self, inputs: tuple, params: dict, poison: bool, offsets=None):
        reply = _check(self.process.request(
            {"op": "forward", "name": self.name, "inputs": list(inputs), "params": params,
             "poison": bool(poison), "offsets": None if offsets is None else list(offsets)},
            budget=self._budget(inputs, params)))
        out = reply.get("out")
        if not isinstance(out, np.ndarray):
            out = Returned(str(reply.get("returned", "None"))[:200])
        return out, _handed(reply)

    def vjp_stand_in(self, capsule):
        return RemoteVJP(self) if self._has_vjp else None


class RemoteVJP:
    """The capsule's VJP, called in its kernel process."""

    def __init__(self, handler: RemoteHandler) -> None:
        self.handler = handler

    def call(self, inputs: tuple, out, g, params: dict, poison: bool, offsets=None):
        h = self.handler
        reply = _check(h.process.request(
            {"op": "vjp", "name": h.name, "inputs": list(inputs), "out": out, "g": g,
             "params": params, "poison": bool(poison),
             "offsets": None if offsets is None else list(offsets)},
            budget=h._budget(inputs, params, [out, g])))
        grads = reply.get("grads")
        if isinstance(grads, list) and all(x is None or isinstance(x, np.ndarray)
                                           for x in grads):
            return tuple(grads), _handed(reply)
        return Returned(str(reply.get("returned", "None"))[:200]), _handed(reply)
