"""scripts/check.sh --cuda --sanitize (scripts/sanitize.py, sanitize_log.py, tests/sanitizer/):
the reading of compute-sanitizer's output (fixtures/sanitizer/, written from the documented
format), the verdicts (a plant not reported, errors, no tests), the table, check.sh's arguments,
and the whole run against a fake compute-sanitizer. The plants themselves run plainly on a GPU."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sanitizer"


def _load(name: str, path: Path):
    """A script as a module, registered first (dataclasses look their module up) and once
    (sanitize.py's own `import sanitize_log` then finds the same module: one set of classes)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


SL = _load("sanitize_log", REPO / "scripts" / "sanitize_log.py")
SK = _load("sanitize_kernels", REPO / "scripts" / "sanitize_kernels.py")
SZ = _load("sanitize", REPO / "scripts" / "sanitize.py")


def _fixture(name: str):
    return SL.parse((FIXTURES / name).read_text())


# -- reading the output --------------------------------------------------------------------

def test_memcheck_plant_counts_the_summary_and_names_the_write():
    log = _fixture("memcheck_plant.txt")
    assert (log.errors, log.summaries) == (2, 1)
    assert log.headlines["Invalid __global__ write of size 4 bytes"] == 1
    assert any(h.startswith("Program hit cudaErrorLaunchFailure") for h in log.headlines)
    # the banner, the indented frames and "Target application returned an error" are not reports
    assert sum(log.headlines.values()) == 2


def test_singular_and_plural_summaries():
    assert SL.parse("========= ERROR SUMMARY: 1 error\n").errors == 1
    assert SL.parse("========= ERROR SUMMARY: 3 errors\n").errors == 3
    clean = _fixture("clean.txt")
    assert (clean.errors, clean.summaries, sum(clean.headlines.values())) == (0, 1, 0)
    # without the prefix, as some versions print to a log file
    assert SL.parse("ERROR SUMMARY: 5 errors\n").errors == 5


def test_the_print_limit_line_is_not_counted_twice():
    log = _fixture("initcheck_plant.txt")
    assert (log.errors, log.summaries) == (64, 1)
    assert log.headlines["Uninitialized __global__ memory read of size 4 bytes"] == 2


def test_racecheck_summary_counts_errors_and_warnings():
    log = _fixture("racecheck_plant.txt")
    assert (log.errors, log.summaries) == (1, 1)
    assert any(h.startswith("Error: Race reported between Write access at plant_shared_race+0x..")
               for h in log.headlines)
    legacy = _fixture("racecheck_legacy.txt")
    assert legacy.errors == 2    # "2 hazards displayed (1 error, 1 warning)": both are reports
    assert "ERROR: Potential RAW hazard detected at __shared__ 0x.. in block (...) :" \
        in legacy.headlines
    # a process that prints both summaries is counted once, by the larger
    both = SL.parse("RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)\n"
                    "ERROR SUMMARY: 3 errors\n")
    assert (both.errors, both.summaries) == (3, 2)


def test_a_synccheck_report_without_the_barrier_prefix_is_the_plant():
    log = SL.parse("========= Divergent thread(s) in block\n========= ERROR SUMMARY: 160 errors\n")
    run = SL.PlantRun("synccheck", log, True, 0, "", "/tmp/x")
    assert (log.errors, SL.plant_failures(run)) == (160, [])


def test_processes_are_summed():
    texts = [(FIXTURES / n).read_text() for n in ("synccheck_plant.txt", "synccheck_plant.txt",
                                                  "clean.txt")]
    log = SL.parse_processes(texts)
    assert (log.errors, log.summaries) == (2, 3)
    assert log.headlines["Barrier error detected. Divergent thread(s) in block"] == 2


# -- the plant's verdict -------------------------------------------------------------------

def _plant(tool: str, fixture: str, launched: bool = True, rc: int = 0):
    return SL.PlantRun(tool=tool, log=_fixture(fixture), launched=launched, returncode=rc,
                       output_tail="ModuleNotFoundError: No module named 'cupy'",
                       log_path=f"/tmp/sanitize/{tool}/plant")


@pytest.mark.parametrize("tool", SL.TOOLS)
def test_each_plant_fixture_proves_its_tool(tool):
    assert SL.plant_failures(_plant(tool, f"{tool}_plant.txt")) == []


def test_a_clean_plant_run_fails_with_plant_not_reported():
    [failure] = SL.plant_failures(_plant("racecheck", "clean.txt"))
    assert isinstance(failure, SL.PlantNotReported)
    text = str(failure)
    assert "racecheck ran its plant (tests/sanitizer/plant.py racecheck) but did not report it" \
        in text
    assert "got 0 error(s) and no report at all" in text
    assert "clean runs would prove nothing" in text and "/tmp/sanitize/racecheck/plant" in text


def test_a_report_of_another_kind_does_not_count_as_the_plant():
    # memcheck's log with errors, but the plant wanted is initcheck's uninitialised read
    [failure] = SL.plant_failures(_plant("initcheck", "memcheck_plant.txt"))
    assert isinstance(failure, SL.PlantNotReported)
    assert "got 2 error(s) and Invalid __global__ write of size 4 bytes" in str(failure)


def test_a_plant_that_never_launched_is_a_driver_failure():
    [failure] = SL.plant_failures(_plant("memcheck", "clean.txt", launched=False, rc=1))
    assert isinstance(failure, SL.PlantDriverFailed)
    assert "exited with status 1 before its kernel ran" in str(failure)
    assert "No module named 'cupy'" in str(failure)
    hung = _plant("synccheck", "clean.txt")
    hung.timed_out = True
    [failure] = SL.plant_failures(hung)
    assert "did not report it (the plant was stopped at its time limit: a hang)" in str(failure)


# -- the tests' verdict --------------------------------------------------------------------

def _tests(fixture="clean.txt", passed=5, failed=0, skipped=1, timed_out=None):
    log = _fixture(fixture) if fixture else SL.Log()
    return SL.TestRun(log=log, passed=passed, failed=failed, skipped=skipped,
                      timed_out=timed_out, log_path="/tmp/sanitize/memcheck/tests")


def test_a_clean_run_passes():
    assert SL.test_failures("memcheck", _tests()) == []


def test_reported_errors_fail_with_their_kinds():
    [failure] = SL.test_failures("memcheck", _tests("memcheck_plant.txt"))
    assert isinstance(failure, SL.SanitizerReportedErrors)
    assert str(failure).startswith("memcheck reported 2 error(s) in the tests (1 x Invalid "
                                   "__global__ write of size 4 bytes; 1 x Program hit")


def test_no_summary_means_the_tool_did_not_run():
    [failure] = SL.test_failures("synccheck", _tests(fixture=None))
    assert isinstance(failure, SL.SanitizerSummaryMissing)
    assert "synccheck printed no ERROR SUMMARY for the tests" in str(failure)


def test_an_error_status_without_a_readable_count_still_fails():
    run = _tests()
    run.flagged = True
    [failure] = SL.test_failures("initcheck", run)
    assert isinstance(failure, SL.SanitizerReportedErrors)
    assert "initcheck exited with its error status" in str(failure)
    assert "no error count this script could read" in str(failure)


def test_failed_missing_and_empty_test_runs():
    [failed] = SL.test_failures("initcheck", _tests(passed=3, failed=2))
    assert isinstance(failed, SL.TestsFailed) and "2 test(s) failed or errored" in str(failed)
    [crashed] = SL.test_failures("initcheck", _tests(passed=None))
    assert isinstance(crashed, SL.TestsFailed) and "wrote no JUnit report" in str(crashed)
    [empty] = SL.test_failures("initcheck", _tests(passed=0, skipped=12))
    assert isinstance(empty, SL.NoTestsRan)
    assert "no test passed under initcheck (12 skipped)" in str(empty)


def test_a_timed_out_run_fails_and_still_counts_what_was_logged():
    failures = SL.test_failures("racecheck", _tests("racecheck_plant.txt", passed=None,
                                                    timed_out=120.0))
    assert [type(f).__name__ for f in failures] == ["RunTimedOut", "SanitizerReportedErrors"]
    assert "ran past 120 s and were stopped" in str(failures[0])


# -- the table -----------------------------------------------------------------------------

def test_the_table_has_a_row_per_tool_and_the_reasons_below():
    ok = SL.ToolResult("memcheck", _plant("memcheck", "memcheck_plant.txt"), _tests(), [], 61.4)
    missed_plant = _plant("racecheck", "clean.txt")
    missed = SL.ToolResult("racecheck", missed_plant, None, SL.plant_failures(missed_plant))
    bad_tests = _tests("synccheck_plant.txt", passed=7, failed=1)
    bad = SL.ToolResult("synccheck", _plant("synccheck", "synccheck_plant.txt"), bad_tests,
                        SL.test_failures("synccheck", bad_tests), 9.6)
    lines = SL.table([ok, missed, bad]).splitlines()
    assert lines[0].split("  ")[0] == "tool"
    assert [ln.split() for ln in lines[1:4]] == [
        ["memcheck", "yes", "(2)", "5/0/1", "0", "61", "s", "ok"],
        ["racecheck", "NO", "(0)", "not", "run", "-", "0", "s", "FAILED"],
        ["synccheck", "yes", "(1)", "7/1/1", "1", "10", "s", "FAILED"]]
    assert lines[4].startswith("racecheck: PlantNotReported: racecheck ran its plant")
    assert lines[5].startswith("synccheck: SanitizerReportedErrors: synccheck reported 1 error")
    assert lines[6].startswith("synccheck: TestsFailed: 1 test(s) failed or errored")


# -- the script's arguments and environment ------------------------------------------------

def test_unknown_tools_are_a_usage_error(capsys):
    assert SZ.main(["--tools", "memcheck,leakcheck"], env={}) == 2
    err = capsys.readouterr().err
    assert "UnknownSanitizerTool: sanitizer tools 'memcheck,leakcheck': leakcheck not known" \
        in err
    assert "subset of memcheck,racecheck,initcheck,synccheck" in err


_WORKERS = "a whole number of pytest-xdist workers (0: one process)"


@pytest.mark.parametrize("name,value,expected", [
    ("TORCHLEAN_SANITIZE_WORKERS", "four", _WORKERS),
    ("TORCHLEAN_SANITIZE_WORKERS", "-1", _WORKERS),
    ("TORCHLEAN_SANITIZE_TIMEOUT", "5m", "seconds for each tool's test run (0: no limit)")])
def test_bad_numbers_in_the_environment_are_usage_errors(name, value, expected, capsys):
    assert SZ.main([], env={name: value}) == 2
    assert capsys.readouterr().err.strip() == \
        f"sanitize.py: SanitizeUsageError: {name} is '{value}'; expected {expected}"


def test_a_missing_sanitizer_names_the_cuda_toolkit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(SZ, "TOOLKIT_HOMES", ())   # a GPU machine's own toolkit is not searched
    env = {"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path)}
    assert SZ.main(["--out", str(tmp_path / "out")], env=env) == 1
    err = capsys.readouterr().err
    assert f"SanitizerNotFound: compute-sanitizer was not found on PATH nor under {tmp_path}:" \
        in err
    assert "it is part of the CUDA toolkit" in err and "TORCHLEAN_COMPUTE_SANITIZER" in err
    with pytest.raises(SZ.SanitizerNotFound, match="'/nowhere/cs', which is not an executable"):
        SZ.find_sanitizer({"TORCHLEAN_COMPUTE_SANITIZER": "/nowhere/cs"})


def test_the_toolkit_home_is_searched(tmp_path):
    exe = tmp_path / "bin" / "compute-sanitizer"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert SZ.find_sanitizer({"PATH": "", "CUDA_HOME": str(tmp_path)}) == str(exe)


def test_at_file_arguments_expand_to_their_lines(tmp_path):
    (tmp_path / "ids.txt").write_text("# a comment\n\ntests/a.py::t[x]\n  tests/b.py\n")
    assert SZ.expand_args(["-x", "@ids.txt"], root=tmp_path) == \
        ["-x", "tests/a.py::t[x]", "tests/b.py"]


def test_junit_counts(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite tests="9" failures="1" errors="1" skipped="3">'
                     '</testsuite></testsuites>')
    assert SZ.junit_counts(junit) == (4, 2, 3)
    assert SZ.junit_counts(tmp_path / "none.xml") == (None, 0, 0)


@pytest.mark.parametrize("selection", ["representative.txt", "kernels.txt"])
def test_the_sanitizer_selections_are_still_collected(selection):
    ids = SZ.expand_args([f"@tests/sanitizer/{selection}"])
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:xdist", "-p", "no:cacheprovider", *ids], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = {ln.split("[")[0] for ln in proc.stdout.splitlines() if "::" in ln}
    assert {i.split("[")[0] for i in ids} == collected


# -- check.sh ------------------------------------------------------------------------------

def _check_sh(*args):
    return subprocess.run(["bash", "scripts/check.sh", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_check_sh_sanitize_without_cuda_is_a_usage_error():
    proc = _check_sh("--sanitize")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "check.sh: --sanitize was given without --cuda; the sanitizers check the GPU tests, so "
        "run scripts/check.sh --cuda --sanitize on a GPU machine")


def test_check_sh_unknown_argument_names_the_accepted_ones():
    proc = _check_sh("--cuda", "--sanitise")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("check.sh: unknown argument '--sanitise'; expected --cuda, "
                                   "--cuda --sanitize or nothing")


# -- the whole run, against a fake compute-sanitizer ---------------------------------------

_FAKE = '''\
#!{python}
"""A stand-in for compute-sanitizer: writes a canned log for the plant and a JUnit report for
the tests, as the real one's target would; FAKE_MISS names a tool that misses its plant."""
import os, shutil, sys
argv = sys.argv[1:]
tool = argv[argv.index("--tool") + 1]
log = argv[argv.index("--log-file") + 1].replace("%p", "4242")
target = argv[argv.index("{python}"):]
assert argv[argv.index("--target-processes") + 1] == "all"
# what lies between the log file and the target: TORCHLEAN_SANITIZE_OPTIONS
extra = argv[argv.index("--log-file") + 2:argv.index("{python}")]
assert extra == os.environ.get("FAKE_OPTIONS", "").split(), extra
assert os.environ["TORCHLEAN_SANITIZER"] == tool
if "tests/sanitizer/plant.py" in target:
    print("plant launched: " + tool)
    miss = os.environ.get("FAKE_MISS") == tool
    shutil.copy(os.path.join("{fixtures}", "clean.txt" if miss else tool + "_plant.txt"), log)
else:
    junit = next(a.split("=", 1)[1] for a in target if a.startswith("--junitxml="))
    assert target[target.index("-m", 2) + 1] == "cuda", target
    with open(junit, "w") as f:
        f.write('<testsuites><testsuite tests="4" failures="0" errors="0" skipped="1"/>'
                '</testsuites>')
    shutil.copy(os.path.join("{fixtures}", "clean.txt"), log)
    shutil.copy(os.path.join("{fixtures}", "clean.txt"), log.replace("4242", "4243"))
    # two test processes, as tests/conftest.py writes them: one kernel each, one in both
    kernels = os.environ["TORCHLEAN_KERNEL_LOG_DIR"]
    os.makedirs(kernels, exist_ok=True)
    for pid, names in ((4242, "elementwise.cu:tl_exp_fwd\\n"),
                       (4243, "elementwise.cu:tl_exp_fwd\\nxent.cu:tl_xent_rows\\n")):
        with open(os.path.join(kernels, "kernels.%d.txt" % pid), "w") as f:
            f.write(names)
'''


@pytest.fixture
def fake_sanitizer(tmp_path):
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(_FAKE.format(python=sys.executable, fixtures=FIXTURES))
    exe.chmod(0o755)
    return exe


def test_a_full_run_prints_the_table_and_passes(fake_sanitizer, tmp_path, capsys):
    env = {"TORCHLEAN_COMPUTE_SANITIZER": str(fake_sanitizer), "TORCHLEAN_SANITIZE_WORKERS": "0",
           "TORCHLEAN_SANITIZE_TESTS": "@tests/sanitizer/representative.txt"}
    assert SZ.main(["--out", str(tmp_path / "out")], env=env) == 0
    out = capsys.readouterr().out
    rows = out.split("== sanitizer summary\n")[1].splitlines()
    plant_errors = {"memcheck": 2, "racecheck": 1, "initcheck": 64, "synccheck": 1}
    assert [r.split()[:5] + r.split()[6:] for r in rows[1:5]] == [
        [t, "yes", f"({plant_errors[t]})", "3/0/1", "0", "s", "ok"] for t in SL.TOOLS]
    assert (tmp_path / "out" / "racecheck" / "plant" / "sanitizer.4242.log").is_file()
    total = len(SK.all_kernels(REPO))
    assert f"memcheck: kernels reached: 2 of {total}; not reached (no sanitizer checked them): " \
        "attention.cu:" in out
    # a second run into the same folder counts its own logs only
    stale = tmp_path / "out" / "memcheck" / "tests" / "sanitizer.999.log"
    stale.write_text((FIXTURES / "memcheck_plant.txt").read_text())
    assert SZ.main(["--tools", "memcheck", "--out", str(tmp_path / "out")], env=env) == 0
    assert not stale.exists()


def test_a_missed_plant_fails_the_run_and_skips_its_tests(fake_sanitizer, tmp_path, capsys,
                                                          monkeypatch):
    monkeypatch.setenv("FAKE_MISS", "synccheck")
    monkeypatch.setenv("FAKE_OPTIONS", "--report-api-errors no")   # checked by the fake
    env = {"TORCHLEAN_COMPUTE_SANITIZER": str(fake_sanitizer), "TORCHLEAN_SANITIZE_WORKERS": "0",
           "TORCHLEAN_SANITIZE_OPTIONS": "--report-api-errors no"}
    assert SZ.main(["--tools", "memcheck,synccheck", "--out", str(tmp_path / "out")],
                   env=env) == 1
    out = capsys.readouterr().out
    rows = out.split("== sanitizer summary\n")[1].splitlines()
    assert rows[1].split()[:5] == ["memcheck", "yes", "(2)", "3/0/1", "0"]
    assert rows[1].split()[-1] == "ok"
    row = rows[2].split()
    assert row[:6] + row[7:] == ["synccheck", "NO", "(0)", "not", "run", "-", "s", "FAILED"]
    assert "synccheck: PlantNotReported: synccheck ran its plant" in out
    assert "== synccheck: pytest" not in out


# -- kernel coverage --------------------------------------------------------------------------

def test_kernels_are_found_written_out_and_stamped_by_macros():
    text = textwrap.dedent('''\
        extern "C" __global__ void plain_one(float* a) {}
        extern "C" __global__ void __launch_bounds__(256) bounded(float* a) {}
        #define STAMP(name, T)                                       \\
            extern "C" __global__ void name(T* a) { a[0] = 1; }
        #define NOT_A_KERNEL(x) (x + 1)
        STAMP(stamped_f, float)
        STAMP(stamped_d, double)
        __device__ void helper(float* a) {}
        ''')
    assert SK.kernels_in(text) == {"plain_one", "bounded", "stamped_f", "stamped_d"}


def test_every_declared_kernel_is_among_all_kernels():
    """The enumeration misses none of the kernels the engine declares (the source map)."""
    from engine import native_sources
    found = SK.all_kernels(REPO)
    declared = {k for src in native_sources.CAPSULE_SOURCES.values() for k in src.kernels()}
    declared |= {k for src in native_sources.TAPE_SOURCES.values() for k in src.kernels()}
    assert declared and declared <= found, sorted(declared - found)[:10]


def test_select_covers_every_first_fetch_preferring_cheap_tests(tmp_path):
    SK.write_reached(tmp_path, [], 1, [("t::slow", 60.0, [("a.cu", "k1"), ("a.cu", "k2")]),
                                       ("t::none", 0.1, [])])
    SK.write_reached(tmp_path, [], 2, [("t::fast", 0.5, [("a.cu", "k1")]),
                                       ("t::other", 1.0, [("a.cu", "k2"), ("b.cu", "k3")])])
    # k1 from the fast test, k2 and k3 from the other: the slow one adds nothing
    assert SK.select(tmp_path) == ["t::fast", "t::other"]
    assert SK.select(tmp_path / "empty") == []


def test_select_command_names_a_directory_without_a_log(tmp_path, capsys):
    assert SK.main(["select", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sanitize_kernels.py: NoKernelLog: ") and "TORCHLEAN_KERNEL_LOG_DIR" in err
    assert SK.main(["choose", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("usage: python scripts/sanitize_kernels.py select")
    SK.write_reached(tmp_path, [], 1, [("t::a", 1.0, [("a.cu", "k1")])])
    assert SK.main(["select", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "t::a\n"


def test_reached_kernels_are_gathered_from_every_process(tmp_path):
    SK.write_reached(tmp_path, [("a.cu", "k1"), ("b.cu", "k2")], 1)
    SK.write_reached(tmp_path, [("a.cu", "k1")], 2)
    got = SK.reached(tmp_path)
    assert got == {("a.cu", "k1"), ("b.cu", "k2")}
    line = SK.coverage_line({("a.cu", "k1"), ("b.cu", "k2"), ("c.cu", "k3")}, got)
    assert line == "kernels reached: 2 of 3; not reached (no sanitizer checked them): c.cu:k3"


# -- the plants -----------------------------------------------------------------------------

def test_every_plant_kernel_is_in_planted_cu():
    plant = _load_plant()
    source = plant.SOURCE.read_text()
    assert set(plant.PLANTS) == set(SL.TOOLS) == set(SL.PLANT_REPORTS)
    for kernel, _ in plant.PLANTS.values():
        assert f'extern "C" __global__ void {kernel}(' in source


def test_the_plant_driver_rejects_an_unknown_tool(capsys):
    assert _load_plant().main(["leakcheck"]) == 2
    assert "got ['leakcheck']; expected one tool name of memcheck, racecheck" in \
        capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_planted_cu_compiles(tmp_path):
    proc = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-c", "-o",
                           str(tmp_path / "planted.o"), "tests/sanitizer/planted.cu"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _load_plant():
    return _load("sanitizer_plant", REPO / "tests" / "sanitizer" / "plant.py")


@pytest.mark.cuda
@pytest.mark.skipif(bool(os.environ.get(SZ.SANITIZER_ENV)),
                    reason="under compute-sanitizer the plants' bugs would be reported as this "
                           "run's own errors; scripts/sanitize.py runs them on their own")
@pytest.mark.parametrize("tool", SL.TOOLS)
def test_each_plant_runs_plainly_and_returns(tool):
    proc = subprocess.run([sys.executable, "tests/sanitizer/plant.py", tool], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"plant launched: {tool}: {_load_plant().PLANTS[tool][0]} "
        f"({_load_plant().PLANTS[tool][1]})",
        f"plant finished: {tool}"]


def test_a_parallel_run_prints_the_same_table_in_the_tools_order(fake_sanitizer, tmp_path,
                                                                  capsys):
    env = {"TORCHLEAN_COMPUTE_SANITIZER": str(fake_sanitizer), "TORCHLEAN_SANITIZE_WORKERS": "0",
           "TORCHLEAN_SANITIZE_TESTS": "@tests/sanitizer/representative.txt",
           "TORCHLEAN_SANITIZE_PARALLEL": "1"}
    assert SZ.main(["--out", str(tmp_path / "out")], env=env) == 0
    rows = capsys.readouterr().out.split("== sanitizer summary\n")[1].splitlines()
    assert [r.split()[0] for r in rows[1:5]] == list(SL.TOOLS)
    assert all(r.split()[3] == "3/0/1" and r.split()[-1] == "ok" for r in rows[1:5])
    for tool in SL.TOOLS:   # each tool wrote its own logs
        assert (tmp_path / "out" / tool / "tests" / "sanitizer.4243.log").is_file()


def test_a_parallel_setting_that_is_not_0_or_1_is_a_usage_error(capsys):
    assert SZ.main([], env={"TORCHLEAN_SANITIZE_PARALLEL": "yes"}) == 2
    assert "TORCHLEAN_SANITIZE_PARALLEL is 'yes'; expected 0" in capsys.readouterr().err
    assert SZ.main([], env={"TORCHLEAN_SANITIZE_PARALLEL": "2"}) == 2
