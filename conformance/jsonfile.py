"""One reader for the harness's format-tagged JSON files (evidence records, replay files, trust
exports, test manifests) and one atomic writer. Every way a file can be unusable (missing,
unreadable, not UTF-8, not JSON, not an object, the wrong tag) becomes one named error that says
which file and what to do, never a traceback."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0o022)   # os.umask only reads by setting: done once, at import, not per write
    os.umask(mask)
    return mask


_UMASK = _read_umask()


class UnusableFileError(Exception):
    """A harness file that cannot be used; the message names the file, the problem and the fix."""

    def __init__(self, path, problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = Path(path), problem, fix
        super().__init__(f"{path}: {problem}; {fix}")


def read_object(path, fix: str) -> dict:
    """The JSON object in `path`, or UnusableFileError (`fix` says what to do about it)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnusableFileError(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusableFileError(path, f"is not UTF-8 text (byte {exc.start})", fix) from None
    if not text.strip():
        raise UnusableFileError(path, "is empty", fix)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnusableFileError(path, f"is not valid JSON ({exc.msg} at line {exc.lineno}, "
                                      f"column {exc.colno}; truncated?)", fix) from None
    if not isinstance(doc, dict):
        raise UnusableFileError(path, f"holds a JSON {type(doc).__name__}, not an object", fix)
    return doc


def read_tagged(path, key: str, tag: str, what: str, fix: str) -> dict:
    """read_object, and the object's `key` must equal `tag` (e.g. format = ...-replay)."""
    doc = read_object(path, fix)
    if doc.get(key) != tag:
        raise UnusableFileError(path, f"is not {what} ({key}={doc.get(key)!r}, expected "
                                      f"{tag!r})", fix)
    return doc


def write_atomic(path, data: dict | str) -> None:
    """Write to a temporary file beside `path`, then os.replace: readers never see half a file.
    The file gets the permissions the umask gives a new file (mkstemp alone would give 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
