"""Process hygiene on Linux: a kernel process dies with its judge, a judge adopts and kills every
process its kernel left behind (forks, double forks, new sessions), and the judge's memory and
environment are closed to other processes of the same user (no ptrace, no /proc/PID/mem).

Only what a kernel started is ever killed, never the host's own children: the harness also runs
inside processes that have children of their own (a Dask LocalCluster's client, whose nannies'
worker processes and multiprocessing resource tracker are its children; a Dask worker; a test
runner), and killing those cost a cluster its workers (kill_children says how it tells them apart).

Each call is a no-op where the OS lacks it (prctl is Linux's): the isolation still holds through
separate processes and the run nonce there, but a fork that outlives its kernel is not adopted.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
KERNEL_PROCESS_NAME = b"tl-kernel"   # /proc/PID/comm (and ps) of every kernel process


def _prctl(option: int, value) -> bool:
    """prctl(option, value): an integer value, or a ctypes argument as it is (a name's pointer,
    a byref to a flag prctl writes)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        arg = ctypes.c_ulong(value) if isinstance(value, int) else value
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent ends; end now if the parent already has."""
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != expected_parent:
        os._exit(137)


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (not to init), so it can end them."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    """Whether this process adopts its orphaned descendants (a fork does not inherit it)."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) and flag.value != 0


# Kernel processes this process forked (prefork), killed whatever their session: a fork is in
# this process's session until its first act, setsid, and kill_children may run before that.
_STARTED: set[int] = set()


def started_kernel(pid: int) -> None:
    """Mark a child this process forked as a kernel process: kill_children ends it."""
    _STARTED.add(pid)


def forget_kernel(pid: int) -> None:
    """A marked child was reaped: its pid may be reused by a process that is none of ours."""
    _STARTED.discard(pid)


def not_dumpable() -> bool:
    """Other processes of this user cannot ptrace this one or read its /proc memory or environ."""
    return _prctl(PR_SET_DUMPABLE, 0)


def dumpable() -> bool:
    """Undo not_dumpable (which a fork keeps and an exec resets): a kernel process forked from
    its judge is as inspectable, and dumps core, as one started afresh."""
    return _prctl(PR_SET_DUMPABLE, 1)


def name_kernel_process() -> bool:
    """Name this process `tl-kernel` in /proc/PID/comm, so that a user (ps, top) and the tests
    tell a kernel process from its judge whichever way it was started."""
    return _prctl(PR_SET_NAME, ctypes.c_char_p(KERNEL_PROCESS_NAME))


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()   # the name may hold spaces and parentheses
    return int(fields[1]), int(fields[3])


def children(pid: int | None = None) -> list[tuple[int, int]]:
    """(pid, session id) of every live child of `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if e.isdigit():
            st = _stat(int(e))
            if st is not None and st[0] == pid:
                out.append((int(e), st[1]))
    return out


def _reap(pid: int) -> None:
    """Wait for a killed child: once it is reaped, its own children are ours (re-parented)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def kernel_made(pid: int, sid: int, own_sid: int, adopting: bool) -> bool:
    """Whether a child of this process is a kernel process or something one left behind.

    A kernel process starts a session of its own (setsid, both ways it is started), and a
    process can only ever stay in its parent's session or start a new one: nothing a kernel
    starts, however deep, is in this process's session. The host's own children are born in it
    (multiprocessing's resource tracker and spawned workers, a Dask nanny's worker processes, a
    runner's judges), so a child in this session is never a kernel's. A child in another
    session is a kernel's only when it can be one: an orphan is re-parented to this process only
    while it is a subreaper (`adopting`); otherwise such a child was started by the host (with
    start_new_session, say). A kernel this process forked itself counts whatever its session
    (it may not have called setsid yet)."""
    return pid in _STARTED or (adopting and sid != own_sid)


def kill_children(select=lambda pid, sid: True, settle_s: float = 0.0,
                  limit_s: float = 5.0) -> int:
    """SIGKILL every child a kernel made (kernel_made) that `select(pid, sid)` also picks, reap
    it, and repeat until none is left for `settle_s` or `limit_s` passed. A reaped child's
    children are re-parented to this process (a subreaper) before waitpid returns, so each round
    finds the next generation; `settle_s` waits for orphans of a process that is still dying
    elsewhere. The host's own children are never killed or reaped (reaping one would steal its
    exit status from whoever started it). Returns how many were killed."""
    own_sid, adopting = os.getsid(0), is_subreaper()
    killed, quiet_since, t0 = 0, None, time.monotonic()
    while time.monotonic() - t0 < limit_s:
        found = [(p, s) for p, s in children()
                 if kernel_made(p, s, own_sid, adopting) and select(p, s)]
        if not found:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= settle_s:
                break
            time.sleep(0.02)
            continue
        quiet_since = None
        for pid, _ in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
            _reap(pid)
            forget_kernel(pid)
    return killed
