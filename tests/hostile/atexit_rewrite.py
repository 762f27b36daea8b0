"""Registers an atexit hook, and SIGTERM/SIGINT handlers, that rewrite its record as passing when
the kernel process ends."""
import atexit
import signal

from tests.hostile._common import entry, forge, wrong_abs

atexit.register(forge, "atexit_rewrite")
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, f: forge("atexit_rewrite"))

ENTRIES = entry("atexit_rewrite", wrong_abs)
