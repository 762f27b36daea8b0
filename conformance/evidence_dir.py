"""An evidence directory: where each capsule's record and replay files go (paths built from
validated capsule names and checked to stay inside), that it can be written before any work
starts, and one writer at a time (an OS file lock whose holder is named when another run asks)."""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import socket
import sys
from pathlib import Path

from conformance.exit_codes import EnvironmentFailure
# Where runs write and readers look by default (`run`, `export-trust`, the suites, `report` and
# `trust-boundaries --check` all use it), defined in the engine, which reads trust exports there.
from engine.earned_trust import DEFAULT_EVIDENCE_ROOT

LOCK_FILE = ".torchlean-evidence.lock"


def default_evidence_dir(device: str) -> Path:
    """reports/evidence/<device>/ under the current directory."""
    return DEFAULT_EVIDENCE_ROOT / device


def default_evidence_dirs(root: Path = DEFAULT_EVIDENCE_ROOT) -> list[Path]:
    """Every reports/evidence/<device>/ that exists, in name order."""
    return sorted(p for p in Path(root).glob("*") if p.is_dir()) if Path(root).is_dir() else []


class EvidenceDirError(Exception):
    """An evidence directory that cannot be used: not a directory, not writable, or a path that
    would leave it."""


class EvidenceDirBusyError(EvidenceDirError):
    """Another run holds the evidence directory's lock."""


def _inside(root: Path, path: Path) -> Path:
    root_r, path_r = root.resolve(), path.resolve()
    if path_r.parent != root_r and root_r not in path_r.parents:
        if path.is_symlink():
            raise EvidenceDirError(f"evidence path {path} is a symbolic link to {path_r}, "
                                   f"outside the evidence directory {root}; delete the link "
                                   "(records are written inside the directory)")
        raise EvidenceDirError(f"evidence path {path} would lie outside the evidence directory "
                               f"{root}; capsule names must be dotted identifiers")
    return path


def record_path(evidence_dir, capsule_name: str) -> Path:
    """<dir>/<capsule name>.json for a validated name, checked to stay under <dir>."""
    from engine.capsule import check_capsule_name
    root = Path(evidence_dir)
    return _inside(root, root / f"{check_capsule_name(capsule_name)}.json")


def replay_path(evidence_dir, capsule_name: str, cls: str, index: int) -> Path:
    from engine.capsule import check_capsule_name
    root = Path(evidence_dir)
    safe_cls = "".join(c if c.isalnum() or c in "-_" else "_" for c in cls)
    return _inside(root, root / "replays" /
                   f"{check_capsule_name(capsule_name)}-{safe_cls}-{int(index)}.json")


# The machine's refusals, not the path's: no space, no quota left, a read-only or failing disk.
# Any path the user gives meets them alike, so they are environment failures (exit 4), not usage.
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def unwritable(directory) -> str | None:
    """Why no file can be written in `directory` (created when missing), or None: a file in its
    place, or the OS's refusal, found by writing and removing a probe file. A refusal of the
    machine's (MACHINE_ERRNOS: a full disk) is raised as an EnvironmentFailure."""
    root = Path(directory)
    if root.exists() and not root.is_dir():
        return "is a file, not a directory"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:
            raise EnvironmentFailure("cannot write in", root, exc) from None
        return f"cannot be written ({exc.strerror or exc})"
    return None


def ensure_writable(evidence_dir) -> Path:
    """Create the directory if needed and prove a file can be written there, before any work."""
    root = Path(evidence_dir)
    if root.exists() and not root.is_dir():
        raise EvidenceDirError(f"--evidence-dir {root} is a file, not a directory; pass a "
                               "directory (it is created when missing)")
    problem = unwritable(root)
    if problem:
        raise EvidenceDirError(f"evidence directory {root} {problem}; pass a writable "
                               "--evidence-dir")
    return root


class EvidenceLock:
    """`with EvidenceLock(dir):` - an exclusive flock on <dir>/.torchlean-evidence.lock, held for
    the whole command. The lock file says who holds it (pid, host, command, since when), so a
    second run is refused with that, never left to interleave records of two seeds."""

    def __init__(self, evidence_dir) -> None:
        self.root = Path(evidence_dir)
        self._fd: int | None = None

    def __enter__(self) -> "EvidenceLock":
        import fcntl
        ensure_writable(self.root)
        path = self.root / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise EnvironmentFailure("cannot open the evidence directory's lock", path,
                                     exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise EvidenceDirBusyError(
                f"evidence directory {self.root} is in use by another run ({holder}); wait for "
                "it to finish, or pass another --evidence-dir") from None
        try:   # who holds it, for the message a second run gets
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({
                "pid": os.getpid(), "host": socket.gethostname(),
                "command": " ".join(sys.argv)[:500],
                "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            }).encode())
        except OSError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise EnvironmentFailure("cannot write the evidence directory's lock", path,
                                     exc) from None
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            import fcntl
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
        return (f"pid {info.get('pid')} on {info.get('host')}, `{info.get('command')}`, "
                f"since {info.get('since')}")
    except (OSError, ValueError):
        return "holder unknown"
