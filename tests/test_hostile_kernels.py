"""The hostile catalogue (tests/hostile/) through the CLI, as a user's audit runs it: every kernel
that tries to pass without being right is flagged with a named reason or refused, no record it
forged or rewrote survives the run, nothing it started outlives it, and the honest control passes.

One `run` audits all the mid-run classes together (each capsule has its own judge and kernel
process); the classes that must stop a run before it starts get runs of their own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MID_RUN = ["honest", "exit0_mid", "exit1_mid", "fork_writes_later", "patch_comparison",
           "patch_numpy", "read_frames", "read_references", "public_generator",
           "cache_by_identity", "previous_output", "alias_input", "write_record",
           "atexit_rewrite", "unbounded_print", "signal_parent"]
FORK_DELAY = 2.0   # the forked forger's wait before it writes (it must not outlive the run)


def cli(*args, env_extra=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text(
    ).split(")")[-1].split()[0]


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    """The mid-run classes audited in one run; an older passing record of each is planted first
    (an exit must never turn it into this run's verdict)."""
    out = tmp_path_factory.mktemp("hostile-evidence")
    for name in MID_RUN:
        (out / f"hostile.{name}.json").write_text(json.dumps(
            {"status": "passed", "capsule": {"name": f"hostile.{name}"}, "planted": True}))
    plugins = [a for m in MID_RUN for a in ("--plugin", f"tests.hostile.{m}:ENTRIES")]
    t0 = time.monotonic()
    proc = cli("run", "--device", "cpu", "--quick", "--cases", "1", "--jobs", "2",
               "--no-progress", "--evidence-dir", str(out), *plugins,
               env_extra={"HOSTILE_EVIDENCE_DIR": str(out), "HOSTILE_FORK_DELAY": str(FORK_DELAY)})
    # Outlast the forked forger's delay: had it survived the run, it would have written by now.
    time.sleep(max(0.0, FORK_DELAY + 1.0 - (time.monotonic() - t0)))
    records = {m: json.loads((out / f"hostile.{m}.json").read_text()) for m in MID_RUN}
    return proc, records, out


# A wrong value is flagged as the element's comparison finds it: bits, an infinity or a NaN where
# the other has none, a zero's sign (which one depends on the values the run's seed drew).
VALUE = {"not-bitwise", "inf-mismatch", "nan-mismatch", "signed-zero"}
# class -> (status, the reasons one of which must be recorded, or None for a status alone)
EXPECTED = {
    "honest": ("passed", None),
    "exit0_mid": ("crashed", None),
    "exit1_mid": ("crashed", None),
    "fork_writes_later": ("failed", VALUE),
    "patch_comparison": ("failed", VALUE),
    "patch_numpy": ("failed", VALUE),
    "read_frames": ("failed", VALUE),
    "read_references": ("failed", {"raised"}),
    "public_generator": ("failed", VALUE),
    "cache_by_identity": ("failed", VALUE),
    "previous_output": ("failed", VALUE),
    "alias_input": ("failed", {"input-mutated"}),
    "write_record": ("failed", VALUE),
    "atexit_rewrite": ("failed", VALUE),
    "unbounded_print": ("passed", None),
    "signal_parent": ("crashed", None),
}


def test_the_run_fails_and_says_why(audit):
    proc, _, _ = audit
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = [line for line in proc.stdout.splitlines() if "capsules without failures" in line]
    assert summary and summary[0].startswith("2 of 16 capsules without failures"), \
        proc.stdout[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("name", MID_RUN)
def test_each_hostile_kernel_is_flagged_for_its_reason(audit, name):
    _, records, _ = audit
    rec = records[name]
    status, reasons = EXPECTED[name]
    assert rec["status"] == status, (rec["status"], rec.get("message"))
    assert "planted" not in rec and "forged" not in rec     # this run's record, not another's
    assert len(rec["run"]["nonce"]) == 32
    if reasons is not None:
        assert reasons & set(rec["failure_reasons"]), rec["failure_reasons"]


def test_exits_and_a_killed_judge_are_crashes_of_this_run(audit):
    _, records, _ = audit
    assert "exited with status 0 before answering" in records["exit0_mid"]["message"]
    assert "exited with status 1 before answering" in records["exit1_mid"]["message"]
    assert "status -9" in records["signal_parent"]["message"]


def test_plugin_cases_come_from_a_seed_the_kernel_never_saw(audit):
    _, records, _ = audit
    runs = [records[n]["run"] for n in MID_RUN if records[n]["status"] != "crashed"]
    assert {r["seed_source"] for r in runs} == {"random"}
    assert len({r["seed"] for r in runs}) == 1 and runs[0]["seed"] != 0   # one seed per run
    assert records["public_generator"]["settings"]["seed"] == runs[0]["seed"]


def test_a_fork_that_waits_to_rewrite_the_record_does_not_outlive_the_run(audit):
    _, records, out = audit
    pid = int((out / "fork_writes_later.pid").read_text())
    assert not _alive(pid)
    assert records["fork_writes_later"]["status"] == "failed"


def test_kernel_output_is_kept_bounded(audit):
    _, records, _ = audit
    printed = records["unbounded_print"]["run"]["kernel_output"]
    assert printed["bytes"] >= 2 * (1 << 20) * 30      # a megabyte on each stream per call
    assert len(printed["kept"]) <= 2 * 4096 + 100
    assert "bytes not kept" in printed["kept"]


def test_no_kernel_process_outlives_the_run(audit):
    _, _, out = audit
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and
            _comm(p) == "tl-kernel" and str(out) not in _cmdline(p)]
    mine = [p for p in left if _ppid(p) in (os.getpid(), 1)]
    assert not mine


def _comm(p: Path) -> str:
    """A kernel process's name, forked from its judge or started afresh (reaper.py)."""
    try:
        return p.joinpath("comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(p: Path) -> str:
    try:
        return p.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ppid(p: Path) -> int:
    try:
        return int(p.joinpath("stat").read_text().split(")")[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


@pytest.mark.parametrize("name,status", [("exit0_import", 0), ("exit1_import", 1)])
def test_a_plugin_that_exits_at_import_is_a_usage_error(tmp_path, name, status):
    for command in (["run", "--device", "cpu", "--quick", "--no-progress"], ["export-trust"]):
        proc = cli(*command, "--plugin", f"tests.hostile.{name}:ENTRIES",
                   "--evidence-dir", str(tmp_path))
        assert proc.returncode == 2, (command, proc.returncode, proc.stderr[-2000:])
        assert f"exited with status {status} while loading its capsules" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_the_public_generator_kernel_passes_only_at_the_public_seed(tmp_path):
    """The control of the seed defence: at seed 0, the seed it regenerated, the same kernel
    passes, so its failure above is the run seed's doing."""
    proc = cli("run", "--device", "cpu", "--quick", "--cases", "1", "--seed", "0",
               "--no-progress", "--evidence-dir", str(tmp_path),
               "--plugin", "tests.hostile.public_generator:ENTRIES")
    rec = json.loads((tmp_path / "hostile.public_generator.json").read_text())
    assert (proc.returncode, rec["status"], rec["run"]["seed_source"]) == (0, "passed", "given")
