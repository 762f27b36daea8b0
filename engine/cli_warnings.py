"""Warnings as a command-line tool shows them: `prog: warning: message`, one line on stderr,
without the source line Python's default display adds (it points into our code, not at what the
user gave). Used by the `torchlean` and `torchlean-conformance` commands."""
from __future__ import annotations

import sys
import warnings


def install(prog: str) -> None:
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        stream = file or sys.stderr
        try:
            stream.write(f"{prog}: warning: {message}\n")
        except (OSError, ValueError):
            pass                    # stderr closed: a warning must never crash the command
    warnings.showwarning = show
