"""What a run says while it works. On a terminal: a tqdm bar with the capsules running now,
elapsed time and an estimate, redrawn when a capsule starts or ends. Elsewhere (a pipe, CI, a
log file): one line per finished capsule through `logging`, so -q silences it and -v adds the
start of each capsule. The runner calls `started` and `finished` from its worker threads.

Whatever the command prints goes through `reader_may_leave`: a reader that leaves early
(`... | head`) stops the printing, never the command, so its records are written and its exit
code is its verdict's."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

log = logging.getLogger("torchlean.conformance")


def configure_logging(verbosity: int) -> None:
    """-q (-1): warnings only; default (0): a line per capsule; -v (1): also each start."""
    level = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("torchlean")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


class ReaderMayLeaveStream:
    """A text stream (stdout, stderr) whose reader may leave: the write or flush that meets the
    closed pipe, and every one after it, is dropped instead of raising BrokenPipeError, and
    `silence` points the stream's descriptor at /dev/null so that what its buffer still holds
    goes nowhere at exit instead of failing again. Everything else is the stream's own."""

    def __init__(self, stream, silence) -> None:
        self._stream = stream
        self._silence = silence
        self.reader_left = False

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._left()
        return len(text)

    def flush(self) -> None:
        if not self.reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._left()

    def _left(self) -> None:
        self.reader_left = True
        try:
            self._silence()
        except (AttributeError, OSError, ValueError):
            pass   # a stream without a descriptor (a test's capture): dropping writes suffices

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    from engine.cli import quiet_broken_pipe   # the one recipe for a closed stdout
    quiet_broken_pipe()


def _silence(stream):
    def silence() -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    return silence


@contextlib.contextmanager
def reader_may_leave():
    """Within: sys.stdout and sys.stderr are ReaderMayLeaveStreams. On leaving, both are flushed
    through their guards (a pipe whose reader left fails there, not in the interpreter's final
    flush, which would print a traceback and exit 120) and put back."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = ReaderMayLeaveStream(out, _silence_stdout)
    sys.stderr = ReaderMayLeaveStream(err, _silence(err))
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _status(rec: dict) -> str:
    return rec.get("status", "?") + (" (resumed)" if rec.get("resumed") else "")


class Progress:
    """A progress display for `total` capsules; `enabled=False` (--no-progress) shows nothing."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done = total, 0
        self.running: list[str] = []
        self._lock = threading.Lock()
        self._bar = None
        self.enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, unit="capsule", dynamic_ncols=True, file=sys.stderr,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}] {postfix}")

    def started(self, name: str) -> None:
        with self._lock:
            self.running.append(name)
            if self._bar is not None:
                self._bar.set_postfix_str(self._running(), refresh=True)
            elif self.enabled:
                log.debug("[%d/%d] %s: started", self.done, self.total, name)

    def finished(self, done: int, total: int, rec: dict) -> None:
        name = (rec.get("capsule") or {}).get("name", "?")
        with self._lock:
            self.done = done
            if name in self.running:
                self.running.remove(name)
            if self._bar is not None:
                self._bar.update(1)
                self._bar.set_postfix_str(self._running(), refresh=False)
                if rec.get("status") not in ("passed", None):
                    self._bar.write(f"{name}: {_status(rec)}", file=sys.stderr)
            elif self.enabled:
                log.info("[%d/%d] %s: %s", done, total, name, _status(rec))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _running(self) -> str:
        names = self.running[:3]
        more = len(self.running) - len(names)
        return ("running " + ", ".join(names) + (f" +{more}" if more else "")) if names else ""
