"""A kernel process forked from the judge's process before the judge knows anything of its run.

Why: a fresh interpreter per capsule (`python -m conformance.isolation.kernel_host`) spends some
0.2 s of CPU importing Python, NumPy and the engine again, for every capsule of a campaign; a fork
of the judge's process gets them already imported, in milliseconds.

What the forked process holds is what a fresh one would: public code. The fork comes first thing
in `conformance.worker`'s main, before the judge reads its spec (the run's seed, nonce, settings,
evidence directory) from standard input and before it imports any of its own modules (references,
bounds, case generation, records: `kernel_host.JUDGE_MODULES`; any found are dropped from the
child's module table, so that importing them meets the guard as in a fresh process). The child
then takes what `subprocess.Popen(..., start_new_session=True)` gave the fresh one: a session of
its own, standard input from /dev/null, standard output and error into the pipe the judge drains,
no other descriptor of the judge's (its stdin, which will carry the spec, above all), default
signal dispositions, death with the judge, the import guard, and the name `tl-kernel` (which
both ways give a kernel process: /proc/PID/comm). It ends as kernel_host.main ends one: a kernel's
sys.exit(code) exits with that code, and no atexit hook runs (neither the kernel's nor, here, the
judge's). No CUDA is touched before the
fork (the engine imports CuPy lazily), so the child initialises its own context.
"""
from __future__ import annotations

import gc
import os
import signal
import sys
import time
import warnings


class ForkedProcess:
    """The few members of subprocess.Popen that KernelProcess uses, for a forked child."""

    def __init__(self, pid: int, stdout) -> None:
        self.pid, self.stdout, self.returncode = pid, stdout, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:   # reaped elsewhere (reaper.kill_children): it has ended
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                from conformance.isolation.reaper import forget_kernel
                forget_kernel(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                import subprocess
                raise subprocess.TimeoutExpired(f"kernel process {self.pid}", timeout)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Forked:
    """A forked kernel process waiting for its `load`: its process and the judge's pipe ends."""

    def __init__(self, proc: ForkedProcess, to_kernel: int, from_kernel: int) -> None:
        self.proc, self.to_kernel, self.from_kernel = proc, to_kernel, from_kernel


def _warm_imports() -> None:
    """What every kernel process imports, imported once before the fork (no judge module)."""
    import numpy  # noqa: F401
    import engine.registry  # noqa: F401
    from conformance.isolation import capsule_codec, kernel_host, kernel_side, wire  # noqa: F401
    import conformance.plugins  # noqa: F401
    import conformance.fingerprint  # noqa: F401


def fork_kernel_host() -> Forked:
    """Fork the kernel process; in the parent, return it. The child never returns."""
    _warm_imports()
    from conformance.isolation.kernel_host import run_to_the_end
    to_kernel_r, to_kernel_w = os.pipe()
    from_kernel_r, from_kernel_w = os.pipe()
    out_r, out_w = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    # The child's collector never scans what it inherited (which would write to every object's
    # header and copy the judge's pages into it); the judge's own collector carries on as before.
    gc.freeze()
    with warnings.catch_warnings():
        # Python 3.12 warns of fork() in a process with more than one OS thread; the judge's
        # other threads at this point are its BLAS pool's, which OpenBLAS makes fork-safe
        # (pthread_atfork) and starts anew in the child
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        pid = os.fork()
    if pid == 0:   # the kernel process: run_to_the_end never returns into the judge's code
        run_to_the_end(lambda: _become_kernel_host(parent, to_kernel_r, from_kernel_w, out_w))
    gc.unfreeze()
    # Until its setsid the child is in this process's session, where reaper.kill_children
    # leaves the host's own children alone: marked, it is ended however early the judge stops.
    from conformance.isolation.reaper import started_kernel
    started_kernel(pid)
    for fd in (to_kernel_r, from_kernel_w, out_w):
        os.close(fd)
    return Forked(ForkedProcess(pid, os.fdopen(out_r, "rb")), to_kernel_w, from_kernel_r)


def _become_kernel_host(parent: int, in_fd: int, out_fd: int, output_fd: int) -> None:
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    keep = sorted({0, 1, 2, in_fd, out_fd})
    for low, high in zip([-1] + keep, keep + [os.sysconf("SC_OPEN_MAX")]):
        if low + 1 < high:   # an empty range is not a no-op for every os.closerange
            os.closerange(low + 1, high)
    # Python's streams on the new descriptors (the judge's may be anything: a test runner's
    # capture, say), as an interpreter started with these descriptors would have them
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, errors="backslashreplace",
                                       buffering=1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    from conformance.isolation import kernel_host
    _forget_judge_modules(kernel_host.is_judge_module)
    from conformance.isolation.reaper import die_with_parent, dumpable, name_kernel_process
    die_with_parent(parent)
    dumpable()
    name_kernel_process()
    sys.meta_path.insert(0, kernel_host.JudgeImportGuard)
    kernel_host.serve(in_fd, out_fd)


def _forget_judge_modules(is_judge_module) -> None:
    """Drop the judge's modules from the module table and from their packages' attributes (none
    should be imported before the fork; this holds the guard even if one was)."""
    for name in [m for m in sys.modules if is_judge_module(m)]:
        del sys.modules[name]
        package, _, leaf = name.rpartition(".")
        if package in sys.modules and hasattr(sys.modules[package], leaf):
            delattr(sys.modules[package], leaf)
