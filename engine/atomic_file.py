"""Output files that training cannot lose: the target is checked before any work starts (a probe
file is created and removed in its directory), and written through a temporary file beside it that
is flushed, fsynced and renamed over the target (os.replace), the directory fsynced after, so a
crash, a full disk or a kill -9 leaves either the old file or the new one under the name, never
half of one. Temporary files are named `.NAME.tmp-PID`; a kill -9 can leave one behind, and the
next write of the same target removes those whose process no longer runs."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from engine.errors import TorchLeanError

TEMP_MARK = ".tmp-"


class TargetPathError(TorchLeanError):
    """An output path that cannot be written: a directory, a missing or unwritable directory, an
    existing non-regular file. Found before any work starts; a usage error (exit code 2)."""


class WriteFailedError(TorchLeanError):
    """Writing the file failed after the checks passed (a full disk, an I/O error, a directory
    made read-only meanwhile): an environment failure."""
    exit_code = 4   # conformance/exit_codes.py's EXIT_ENVIRONMENT (engine/ does not import it)


def temp_path(target: Path, pid: int | None = None) -> Path:
    """The temporary file that process `pid` (default: this one) writes `target` through."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid() if pid is None else pid}")


def check_writable(target, flag: str) -> Path:
    """`target` when a file can be put there: its directory exists and takes a new file (a probe
    temp file is created and removed: os.access says yes to root on a read-only filesystem), and
    it is not a directory or another non-regular file (os.replace would swap out a device node)."""
    target = Path(target)
    parent = target.parent
    if target.is_dir():
        raise TargetPathError(f"{flag} {target} is a directory; pass a file path such as "
                              f"{target / 'params.safetensors'}")
    if not parent.is_dir():
        raise TargetPathError(f"{flag} {target}: directory {parent} does not exist; pass a file "
                              "path in an existing directory")
    if target.exists() and not target.is_file():
        raise TargetPathError(f"{flag} {target} exists and is not a regular file; pass the path "
                              "of a regular file (it is replaced whole)")
    probe = temp_path(target)
    try:
        os.close(_create(probe))
        probe.unlink()
    except OSError as exc:
        raise TargetPathError(f"{flag} {target}: cannot create a file in {parent} "
                              f"({exc.strerror or exc}); pass a file path in a writable "
                              "directory (checked before any work, so no run is lost)") from None
    return target


def write_atomically(target, data: bytes, flag: str) -> Path:
    """Put `data` at `target`: stale temporary files of dead writers removed, then temp file,
    flush, fsync, os.replace, fsync of the directory. On any failure the temp file is removed
    and the old target, if any, is left as it was."""
    target = Path(target)
    tmp = temp_path(target)
    replaced = False
    try:
        remove_stale_temps(target)
        with os.fdopen(_create(tmp), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())   # the bytes on disk before the name points at them
        os.replace(tmp, target)
        replaced = True
        _fsync_directory(target.parent)   # the rename itself on disk
    except OSError as exc:
        state = (f"{target} holds the new file but the rename may not survive a power loss"
                 if replaced else f"{target} is unchanged")
        raise WriteFailedError(f"{flag} {target}: writing failed ({exc.strerror or exc}); "
                               f"{state}; free space or fix the path's permissions, then run "
                               "again") from None
    finally:
        if not replaced:
            tmp.unlink(missing_ok=True)
    return target


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary files of `target` left by processes that no longer run (a kill -9
    mid-write); those of live processes, and names not of our pattern, stay. What was removed."""
    prefix = f".{target.name}{TEMP_MARK}"
    removed = []
    for entry in target.parent.iterdir():
        pid_text = entry.name[len(prefix):] if entry.name.startswith(prefix) else ""
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        if pid != os.getpid() and not _process_alive(pid):
            entry.unlink(missing_ok=True)   # another writer may have removed it first
            removed.append(entry)
    return removed


def _process_alive(pid: int) -> bool:
    if pid <= 0 or os.name != "posix":
        return True     # no safe liveness test (Windows' os.kill terminates): keep the file
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True     # it exists, under another user
    return True


def _create(path: Path) -> int:
    """A new file at `path`, never through a symlink. A file already there under this process's
    pid is a dead process's leftover (pids are reused): this process is not writing it."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                   0o666)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:   # EINVAL: this filesystem cannot sync a directory at all
            raise
    finally:
        os.close(fd)
