"""scripts/check.sh's stages and their closing table (scripts/stages.sh), driven by a stand-in
interpreter that logs each command instead of running it: the stages each job runs, in order;
each one's wall seconds and status in the table; an accepted exit status (the peer audit's 1)
that does not fail the job and one that does; the GPU job's stages that run side by side;
the tests each job selects (TORCHLEAN_CHECK_TESTS); and TORCHLEAN_CHECK_CPU_PART=skip, which leaves
the GPU machine the tests marked cuda and the suites on cuda only."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/usr/bin/env bash
# every call logged; FAKE_EXIT_ON=REGEX:CODE makes a matching call exit CODE, FAKE_SLEEP=S makes
# every call but the probes (-c, -) take S seconds
echo "$*" >> "$FAKE_LOG"
if [ -n "${FAKE_SLEEP:-}" ] && [ "$1" != "-c" ] && [ "$1" != "-" ]; then
    sleep "$FAKE_SLEEP"
fi
if [ -n "${FAKE_EXIT_ON:-}" ] && [[ "$*" =~ ${FAKE_EXIT_ON%:*} ]]; then
    exit "${FAKE_EXIT_ON##*:}"
fi
exit 0
"""


def _check(tmp_path, *args, **env):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    full_env = {**os.environ, "PYTHON": str(fake), "TORCHLEAN_USE_CURRENT_PYTHON": "1",
                "FAKE_LOG": str(log), "OUT": str(tmp_path / "out"),
                "TORCHLEAN_GPU_SUITE_OUT": str(tmp_path / "gpu-suite"), **env}
    full_env.pop("PY", None)
    proc = subprocess.run(["bash", "scripts/check.sh", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=full_env)
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def _table(stdout: str, title: str) -> list[tuple[str, float, str]]:
    """(stage, seconds, status) rows of the table under `== title`: its stages, then the sum of
    their seconds and the job's wall clock."""
    lines = stdout[stdout.index(f"== {title}"):].splitlines()[2:]
    rows = []
    for line in lines:
        m = re.fullmatch(r"(.+?)\s+([0-9]+\.[0-9])(?:\s{2}(.*))?", line)
        if not m:
            break
        rows.append((m.group(1), float(m.group(2)), m.group(3) or ""))
    return rows


def test_the_cpu_job_times_each_stage_and_prints_the_table(tmp_path):
    proc, calls = _check(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _table(proc.stdout, "check.sh: each stage's wall time")
    assert [r[0] for r in rows] == ["tests", "conformance suites on cpu", "export-trust on cpu",
                                    "trust-boundaries --check", "report", "sum of the stages",
                                    "wall clock"]
    assert all(status == "ok" for _, _, status in rows[:-2]) and rows[-1][2] == rows[-2][2] == ""
    assert rows[-2][1] == pytest.approx(sum(r[1] for r in rows[:-2]), abs=0.3)
    assert rows[-1][1] >= rows[-2][1] - 0.3      # one stage after another: the clock is the sum
    pytest_call = next(c for c in calls if c.startswith("-m pytest"))
    # the tests export-trust counts (marked `capsules`), those of the CPU
    assert pytest_call.endswith(" -m capsules and not cuda tests/"), pytest_call
    # the campaign takes a worker per core
    run_call = next(c for c in calls if c.startswith("-m conformance.cli run --device cpu"))
    assert f"--jobs {len(os.sched_getaffinity(0))}" in run_call


def test_a_failed_stage_fails_the_job_and_says_which(tmp_path):
    proc, _ = _check(tmp_path, FAKE_EXIT_ON="export-trust:3")
    assert proc.returncode == 1
    rows = dict((name, status) for name, _, status in
                _table(proc.stdout, "check.sh: each stage's wall time"))
    assert rows["export-trust on cpu"] == "FAILED (exit 3)" and rows["report"] == "ok"


CUDA_STAGES = ["conformance suites on cuda", "PyTorch's kernels: peer audit", "tests",
               "conformance suites on cpu", "GPU suite: examples", "export-trust on cpu",
               "export-trust on cuda", "bench_kernels", "GPU suite: benchmarks",
               "trust-boundaries --check", "report", "sum of the stages", "wall clock"]


def test_the_cuda_job_accepts_the_peer_audits_verdict_but_not_a_harness_error(tmp_path):
    peers = "torch_cuda:ENTRIES"
    proc, calls = _check(tmp_path, "--cuda", FAKE_EXIT_ON=f"{peers}:1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _table(proc.stdout, "check.sh --cuda: each stage's wall time")
    # the parts run side by side come first (the foreground's: the CUDA suites, then PyTorch's
    # audit, which writes the same evidence directory; then the others in the order they
    # started), then export-trust, the timed benchmarks alone, the report
    assert [r[0] for r in rows] == CUDA_STAGES
    assert dict((r[0], r[2]) for r in rows)["PyTorch's kernels: peer audit"] == "ok (exit 1)"
    # the GPU suite's own tables: its examples beside the suites, its benchmarks (quick) after
    # them, never its tests (scripts/test.sh's, or the tests stage's)
    examples = [r[0] for r in _table(proc.stdout, "GPU suite summary (examples)")]
    assert examples[0] == "quickstart" and examples[-3:] == ["fno1d", "sum of the stages",
                                                             "wall clock"]
    benchmarks = [r[0] for r in _table(proc.stdout, "GPU suite summary (benchmarks)")]
    assert benchmarks[:-2] == ["bench", "bench_graphs", "bench_attention", "bench_conv",
                               "bench_spectral"]
    assert "tests" not in examples + benchmarks
    assert all(c.endswith(" --quick") for c in calls if c.startswith("benchmarks/"))
    # their logs go with the job's evidence, never into the caller's $OUT
    assert {"bench_conv.log", "quickstart_cuda.log"} <= {
        p.name for p in (tmp_path / "gpu-suite").iterdir()}
    assert not (tmp_path / "out").exists()
    assert sum(c.startswith("-m pytest") for c in calls) == 1
    pytest_call = next(c for c in calls if c.startswith("-m pytest"))
    assert pytest_call.endswith(" -m capsules tests/"), pytest_call   # both devices' evidence
    proc, _ = _check(tmp_path, "--cuda", FAKE_EXIT_ON=f"{peers}:3")
    assert proc.returncode == 1
    rows = _table(proc.stdout, "check.sh --cuda: each stage's wall time")
    status = dict((r[0], r[2]) for r in rows)
    assert status["PyTorch's kernels: peer audit"] == "FAILED (exit 3)"


def test_the_cuda_jobs_parts_without_timings_run_side_by_side(tmp_path):
    # each call takes 1 s: the tests, the CPU suites and the GPU examples overlap the CUDA
    # suites and the peer audit (one after the other: one evidence directory), the rest runs one
    # after another
    proc, _ = _check(tmp_path, "--cuda", FAKE_SLEEP="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r[0]: r[1] for r in _table(proc.stdout, "check.sh --cuda: each stage's wall time")}
    side = ["conformance suites on cuda", "tests", "conformance suites on cpu",
            "PyTorch's kernels: peer audit", "GPU suite: examples"]
    assert all(rows[name] >= 1.0 for name in side)
    assert rows["GPU suite: examples"] >= 5.0   # its five steps, one after another
    # the 1-s parts ran within the examples' 5 s: the clock is some 4 s under the sum
    assert rows["wall clock"] < rows["sum of the stages"] - 3.0
    for name in side:   # each part's output, after the side-by-side part ended
        assert proc.stdout.index(f"-- stage '{name}'") < proc.stdout.index(
            "-- stage 'export-trust on cpu'")
    # the peer audit started after the CUDA suites ended (its stage line follows theirs, and
    # the foreground prints live)
    assert proc.stdout.index("-- stage 'conformance suites on cuda'") < proc.stdout.index(
        "== PyTorch's kernels: peer audit")


def test_the_cpu_suites_beside_the_cuda_ones_fail_the_job_when_they_fail(tmp_path):
    # with --cuda the CPU suites run in the background beside the CUDA ones: their failure still
    # reaches the table and the exit status, and their output is shown
    proc, calls = _check(tmp_path, "--cuda", FAKE_EXIT_ON="run --device cpu:1")
    assert proc.returncode == 1
    status = dict((r[0], r[2]) for r in
                  _table(proc.stdout, "check.sh --cuda: each stage's wall time"))
    assert status["conformance suites on cpu"] == "FAILED (exit 1)"
    assert status["conformance suites on cuda"] == "ok"
    assert "== conformance suites on cpu" in proc.stdout
    jobs = {c.split()[4]: int(c.split("--jobs ")[1].split()[0]) for c in calls
            if c.startswith("-m conformance.cli run --device") and "--plugin" not in c}
    cores = len(os.sched_getaffinity(0))
    # a quarter of the cores for the CPU suites beside; the CUDA ones in the foreground take
    # them all (the scheduler shares them while the parts beside run)
    assert jobs == {"cpu": max(1, cores // 4), "cuda": cores}


def test_skipping_the_cpu_part_leaves_the_cuda_tests_and_suites(tmp_path):
    proc, calls = _check(tmp_path, "--cuda", TORCHLEAN_CHECK_CPU_PART="skip")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [r[0] for r in _table(proc.stdout, "check.sh --cuda: each stage's wall time")]
    assert "conformance suites on cpu" not in names and "export-trust on cpu" not in names
    assert "conformance suites on cuda" in names and "export-trust on cuda" in names
    pytest_call = next(c for c in calls if c.startswith("-m pytest"))
    assert pytest_call.endswith(" -m capsules and cuda tests/"), pytest_call
    assert not any("--device cpu" in c for c in calls)


@pytest.mark.parametrize("args, env, selection", [
    ((), {}, " -m capsules and not cuda tests/"),
    (("--cuda",), {}, " -m capsules tests/"),
    ((), {"TORCHLEAN_CHECK_TESTS": "all"}, " --deselect "),   # every test, no marker
    (("--cuda",), {"TORCHLEAN_CHECK_TESTS": "all"}, " --deselect "),
    (("--cuda",), {"TORCHLEAN_CHECK_TESTS": "all", "TORCHLEAN_CHECK_CPU_PART": "skip"},
     " -m cuda tests/"),
])
def test_the_tests_each_job_selects(tmp_path, args, env, selection):
    proc, calls = _check(tmp_path, *args, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pytest_call = next(c for c in calls if c.startswith("-m pytest"))
    assert selection in pytest_call and pytest_call.endswith(" tests/"), pytest_call
    if env.get("TORCHLEAN_CHECK_TESTS") == "all" and "TORCHLEAN_CHECK_CPU_PART" not in env:
        assert " -m " not in pytest_call.split(" -q ")[1]
    workers = pytest_call.split(" -n ")[1].split()[0]
    cores = len(os.sched_getaffinity(0))
    if "--cuda" not in args:
        assert workers == "auto"        # alone on the machine
    else:   # beside the suites: a quarter of the cores, half for every test
        part = 2 if env.get("TORCHLEAN_CHECK_TESTS") == "all" else 4
        assert workers == str(max(1, cores // part))


def test_a_wrong_test_selection_is_a_usage_error(tmp_path):
    proc, calls = _check(tmp_path, TORCHLEAN_CHECK_TESTS="some")
    assert proc.returncode == 2 and calls == []
    assert proc.stderr.strip() == (
        "check.sh: TORCHLEAN_CHECK_TESTS='some' is not a choice; expected 'evidence' (the "
        "default: the tests export-trust counts) or 'all' (every test)")


@pytest.mark.parametrize("args, value, message", [
    ((), "skip", "TORCHLEAN_CHECK_CPU_PART=skip leaves the GPU part only, so it needs --cuda"),
    (("--cuda", "--sanitize"), "skip", "needs --cuda (without --sanitize)"),
    (("--cuda",), "gpu", "TORCHLEAN_CHECK_CPU_PART='gpu' is not a choice; expected 'run'"),
])
def test_a_wrong_cpu_part_setting_is_a_usage_error(tmp_path, args, value, message):
    proc, calls = _check(tmp_path, *args, TORCHLEAN_CHECK_CPU_PART=value)
    assert proc.returncode == 2 and message in proc.stderr and calls == []


def test_the_tests_a_later_stage_repeats_are_deselected_and_still_exist(tmp_path):
    """check.sh leaves to its suites stage the tests that stage repeats whole; a renamed test
    would make the --deselect a silent no-op, so each must still be collected by its id."""
    import sys
    proc, calls = _check(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pytest_call = next(c for c in calls if c.startswith("-m pytest"))
    ids = re.findall(r"--deselect (\S+)", pytest_call)
    assert sorted(ids) == [
        "tests/test_reference_campaign.py::test_quick_campaign_over_every_reference_capsule"]
    found = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                            "no:xdist", "-p", "no:cacheprovider", *ids], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and all(i in found.stdout for i in ids), found.stdout
    (tmp_path / "skip").mkdir()
    _, cuda_calls = _check(tmp_path / "skip", "--cuda", TORCHLEAN_CHECK_CPU_PART="skip")
    assert "--deselect" not in next(c for c in cuda_calls if c.startswith("-m pytest"))


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_job_stops_what_runs_beside_too(tmp_path, sig, code):
    """Ctrl-C (SIGINT to the job's process group, as a terminal sends it) or a SIGTERM to the group
    ends the GPU job: the foreground stage ends with the signal, and the parts running beside it,
    which bash makes ignore SIGINT, are stopped with everything they started; nothing is left."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "TORCHLEAN_USE_CURRENT_PYTHON": "1",
           "FAKE_LOG": str(tmp_path / "calls.log"), "OUT": str(tmp_path / "out"),
           "FAKE_SLEEP": "30"}
    env.pop("PY", None)
    # the job starts with a terminal's SIGINT (default), whatever the test run inherited: a
    # suite started in the background of a script ignores SIGINT, its children too, and bash
    # cannot trap a signal it was started ignoring (the test failed so, in no other way)
    proc = subprocess.Popen(["bash", "scripts/check.sh", "--cuda"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(_session(proc.pid)) < 8:
        time.sleep(0.2)   # the foreground stage and the three parts beside it started
    assert len(_session(proc.pid)) >= 8, _session(proc.pid)
    t0 = time.monotonic()
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, out[-2000:] + err[-2000:]
    assert time.monotonic() - t0 < 10          # not after the 30-s sleeps
    assert f"check.sh: stopped by {sig.name}" in err
    time.sleep(0.5)
    assert _session(proc.pid) == []             # no part, fake interpreter or sleep left


def _session(sid: int) -> list[int]:
    """Live processes of session `sid` (the job and all it started)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = p.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(p.name))
    return out
