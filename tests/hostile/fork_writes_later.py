"""Forks on its first call a child that waits for the run to end and then writes a forged passing
record where the capsule's record goes (and its pid, so the test can see whether it survived)."""
import json
import os
import time

from tests.hostile._common import entry, evidence_target, forged_record, wrong_abs

forked = [False]


def forward(a):
    if not forked[0]:
        forked[0] = True
        if os.fork() == 0:
            os.setsid()   # out of the kernel's session and process group, as an escapee would
            target = evidence_target("fork_writes_later")
            if target is not None:
                (target.parent / "fork_writes_later.pid").write_text(str(os.getpid()))
            time.sleep(float(os.environ.get("HOSTILE_FORK_DELAY", "4")))
            if target is not None:
                target.write_text(json.dumps(forged_record("fork_writes_later")))
            os._exit(0)
    return wrong_abs(a)


ENTRIES = entry("fork_writes_later", forward)
