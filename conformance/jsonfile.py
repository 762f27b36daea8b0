"""One reader for the harness's format-tagged JSON files (evidence records, replay files, trust
exports, test manifests) and one atomic writer. Every way a file can be unusable (missing,
unreadable, not a regular file, too large, nested too deeply, not UTF-8, not JSON, not an object,
the wrong tag) becomes one named error that says which file and what to do, never a traceback or
a read that never returns; every way a write can fail is an EnvironmentFailure (exit 4) that
leaves the previous file whole."""
from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from itertools import accumulate
from pathlib import Path

from conformance.exit_codes import EnvironmentFailure

# The largest harness file a reader takes. Honest files are far smaller (2026-12: the largest
# JSON file under evidence/ is 0.5 MB); the cap bounds what one hostile or damaged file (a sparse
# 4 GB file, a symlink to /dev/zero) can make a reader allocate.
MAX_FILE_BYTES = 32 * 2 ** 20
# The deepest nesting of arrays and objects a reader parses. Honest files nest 7 deep (2026-12);
# json's parser recurses once per level, so a 400 KB file of brackets would exhaust the stack.
MAX_JSON_DEPTH = 64

_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))
# A JSON string (escapes included): brackets inside strings do not nest
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]")


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


class RefusedFile(Exception):
    """A file a reader will not read or parse; the message is the problem alone (`is a FIFO
    (named pipe), not a regular file`), for the caller to prefix with the path and follow with
    what to do. `not_a_file`: the path is no regular file inside the directory (delete it),
    rather than a file whose content is unusable (write it again)."""

    def __init__(self, problem: str, not_a_file: bool = False) -> None:
        super().__init__(problem)
        self.not_a_file = not_a_file


def _kind(mode: int) -> str:
    return next((text for test, text in _FILE_KINDS if test(mode)), "not a regular file")


def _inside(path: str, directory) -> bool:
    root = os.path.realpath(directory)
    return os.path.commonpath([root, path]) == root


def read_regular(path, inside=None, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file `path`, or RefusedFile. Never opens a FIFO, device or socket
    (a FIFO blocks the reader, /dev/zero never ends): the kind is checked with lstat/stat before
    opening, the file is opened with O_NONBLOCK and checked again with fstat after. With
    `inside` (a directory), a path whose real location is outside it (a symlink leading out) is
    refused. At most `limit` + 1 bytes are read."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RefusedFile(f"cannot be read ({exc.strerror or exc})") from None
    real = os.path.realpath(path)
    link = f"is a symbolic link to {real}, " if stat.S_ISLNK(st.st_mode) else ""
    if inside is not None and not _inside(real, inside):
        raise RefusedFile(f"{link or f'resolves to {real}, '}outside the directory {inside}",
                          not_a_file=True)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise RefusedFile(f"{link}cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile(f"{link}is {_kind(st.st_mode)}, not a regular file", not_a_file=True)
    if st.st_size > limit:
        raise RefusedFile(f"{link}holds {st.st_size} bytes, more than the {limit} a harness "
                          "file may hold")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RefusedFile(f"{link}cannot be read ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):    # replaced between stat and open
            raise RefusedFile(f"{link}is {_kind(os.fstat(fd).st_mode)}, not a regular file",
                              not_a_file=True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RefusedFile(f"{link}cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise RefusedFile(f"{link}holds more than the {limit} bytes a harness file may hold")
    return b"".join(chunks)


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets in strings not counted),
    found without parsing it."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def check_depth(text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """RefusedFile when the text nests deeper than `limit`: checked before json.loads, whose
    recursion such a text would exhaust."""
    depth = json_depth(text)
    if depth > limit:
        raise RefusedFile(f"nests arrays and objects {depth} deep, more than the {limit} a "
                          "harness file may")


def read_json(path, inside=None):
    """The parsed JSON of the regular file `path` (read_regular, check_depth): RefusedFile, or
    the ValueError of a text that is not UTF-8 or not JSON, for readers that word their own
    messages."""
    text = read_regular(path, inside).decode("utf-8")
    check_depth(text)
    return json.loads(text)


def read_object(path, fix: str, inside=None) -> dict:
    """The JSON object in the regular file `path` (inside the directory `inside`, when given), or
    UnusableFileError (`fix` says what to do about it)."""
    path = Path(path)
    try:
        data = read_regular(path, inside)
    except RefusedFile as exc:
        raise UnusableFileError(path, str(exc), fix) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusableFileError(path, f"is not UTF-8 text (byte {exc.start})", fix) from None
    if not text.strip():
        raise UnusableFileError(path, "is empty", fix)
    try:
        check_depth(text)
        doc = json.loads(text)
    except RefusedFile as exc:
        raise UnusableFileError(path, str(exc), fix) from None
    except json.JSONDecodeError as exc:
        # json's message may end in "at" ("Unterminated string starting at"): the place
        # follows a colon, so no message reads "at at line"
        raise UnusableFileError(path, f"is not valid JSON ({exc.msg}: line {exc.lineno}, "
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


def read_documents(directory, pattern: str, fmt: str, usable, what: str, command: str
                   ) -> tuple[list[dict], list[str]]:
    """The JSON documents of a directory whose names match `pattern`, in format `fmt`, that
    `usable(doc)` accepts (`what` they are), and a line for each file that is not one, naming
    `command` to make it again."""
    found, bad = [], []
    for p in sorted(Path(directory).glob(pattern)):
        try:
            doc = read_json(p, inside=directory)
        except (RefusedFile, ValueError) as exc:
            bad.append(f"{p.name}: cannot be read ({exc}); rerun `{command}`")
            continue
        if not isinstance(doc, dict) or doc.get("format") != fmt or not usable(doc):
            bad.append(f"{p.name}: not {what}; rerun `{command}` or delete it")
            continue
        found.append(doc)
    return found, bad


# --- writing ------------------------------------------------------------------------------------

WRITE_TODO = "free space or fix the path's permissions, then run again (the previous file is kept)"


def _stage(path: Path, content: bytes) -> str:
    """`content` in a synced temporary file beside `path` (same file system, so the rename that
    follows is atomic); its name. The temporary file is removed when writing fails."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.fchmod(fd, 0o666 & ~_UMASK)   # mkstemp alone would give 0600
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def write_files_atomically(contents: dict, what: str = "cannot write") -> None:
    """Write every path -> text (or bytes) of `contents`: each to a synced temporary file beside
    it first, then all renamed over their targets, so a failure (a full disk) leaves every
    previous file whole and no temporary file behind. Any OSError is an EnvironmentFailure
    naming the path; `what` begins its message."""
    staged: list[tuple[str, Path]] = []
    current = None
    try:
        for path, content in contents.items():
            current = Path(path)
            current.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            staged.append((_stage(current, data), current))
        for tmp, path in list(staged):
            current = path
            os.replace(tmp, path)
            staged.remove((tmp, path))
    except OSError as exc:
        raise EnvironmentFailure(what, current, exc, WRITE_TODO) from None
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def write_atomic(path, data: dict | str) -> None:
    """Write to a temporary file beside `path`, then os.replace: readers never see half a file.
    The file gets the permissions the umask gives a new file. A failure is an EnvironmentFailure
    and leaves the previous file as it was."""
    text = data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=False)
    write_files_atomically({Path(path): text})
