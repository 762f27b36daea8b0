"""SIGKILLs its parent (the process that called it) on its third call, after wrong answers."""
import os
import signal

from tests.hostile._common import entry, wrong_abs

calls = [0]


def forward(a):
    calls[0] += 1
    if calls[0] == 3:
        os.kill(os.getppid(), signal.SIGKILL)
    return wrong_abs(a)


ENTRIES = entry("signal_parent", forward)
