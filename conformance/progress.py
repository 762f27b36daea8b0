"""What a run says while it works. On a terminal: a tqdm bar with the capsules running now,
elapsed time and an estimate, redrawn when a capsule starts or ends. Elsewhere (a pipe, CI, a
log file): one line per finished capsule through `logging`, so -q silences it and -v adds the
start of each capsule. The runner calls `started` and `finished` from its worker threads."""
from __future__ import annotations

import logging
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
