"""Exit codes of `torchlean-conformance`, one meaning each (README and `--help` list them), and
the exception for failures of the environment rather than of a kernel, the harness or the user.

    0    every selected capsule passed
    1    a kernel failed: a failed, crashed or timed-out capsule, or a failing suite
    2    a usage error: bad arguments, a bad plugin, replay or evidence file, a busy evidence
         directory, or a selection that selects nothing
    3    a harness error: the harness's own code raised (a defect of this tool, not a verdict)
    4    an environment failure: a full disk, an unwritable or unreadable path
    130  interrupted by SIGINT (Ctrl-C)
    143  terminated by SIGTERM

A closed stdout pipe (`... | head`) never changes the code: the verdict's code stands.
"""
from __future__ import annotations

# The statuses of a capsule's record that mean a kernel failed (exit EXIT_FAILED)
KERNEL_FAILED = frozenset({"failed", "crashed", "timed-out"})

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HARNESS = 3
EXIT_ENVIRONMENT = 4
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

# The worst first wins when several apply: a stop, then verdicts, then usage, environment, harness.
SEVERITY = (EXIT_OK, EXIT_HARNESS, EXIT_ENVIRONMENT, EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED,
            EXIT_TERMINATED)


class EnvironmentFailure(Exception):
    """The machine, not the kernel, the harness or the user's arguments, stopped the command: a
    full disk, a path that cannot be written or read. Its message names the path and the OS error
    and says what to do; the command exits EXIT_ENVIRONMENT."""

    def __init__(self, what: str, path, exc: OSError | None = None, todo: str = "") -> None:
        reason = f": {exc.strerror or exc}" if exc is not None else ""
        super().__init__(f"{what} `{path}`{reason}" + (f"; {todo}" if todo else
                         "; free space or fix the path's permissions, then run again"))
        self.path = path
        self.os_error = exc
