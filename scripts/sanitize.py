"""The GPU tests under compute-sanitizer: memcheck, racecheck, initcheck and synccheck, one tool
at a time (or side by side: --parallel). Each tool first runs its planted bug (tests/sanitizer/plant.py) and must report it, which
proves the tool is checking kernels; then it runs the selected GPU tests and must report nothing.
Prints a table (tool, plant detected, tests passed/failed/skipped, sanitizer errors, verdict), then
how many of the native kernels each tool's tests reached (scripts/sanitize_kernels.py: a sanitizer
checks only the kernels that run) and which it did not, and exits 0 only when every tool passes. scripts/check.sh --cuda --sanitize runs this.

    python scripts/sanitize.py [--tools memcheck,racecheck] [--workers N] [--timeout S]
                               [--parallel] [--out DIR] [-- PYTEST ARGS...]

The tests are `pytest -m cuda` plus PYTEST ARGS (default: tests/, the whole GPU suite); an argument
@FILE is replaced by FILE's lines (blank lines and # comments skipped), e.g.
@tests/sanitizer/representative.txt. Defaults come from the environment, so check.sh stays thin:
TORCHLEAN_SANITIZE_TOOLS (comma-separated), TORCHLEAN_SANITIZE_TESTS (pytest arguments, split as a
shell would), TORCHLEAN_SANITIZE_WORKERS (pytest-xdist workers, 0 = one process; default 4 when
xdist is installed: workers are child processes, which --target-processes all follows),
TORCHLEAN_SANITIZE_TIMEOUT (seconds per tool's test run, 0 = none), TORCHLEAN_SANITIZE_PARALLEL
(1: --parallel, the tools side by side, each with its own workers; on the H200 the four over
tests/sanitizer/kernels.txt with 4 workers each finished in 152 s so), TORCHLEAN_COMPUTE_SANITIZER
(the executable), TORCHLEAN_SANITIZE_OPTIONS (more compute-sanitizer options for every run, e.g.
`--report-api-errors no` when the only reports are CUDA API errors the tests provoke on purpose;
the table's reasons list the kinds reported). Logs, one per process, go under DIR (default
$OUT/sanitize, else /tmp/sanitize).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sanitize_kernels as SK   # noqa: E402  (sibling scripts, not a package)
import sanitize_log as SL   # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLANT = "tests/sanitizer/plant.py"
ERROR_EXITCODE = 86           # compute-sanitizer's status when it reported anything
PRINT_LIMIT = 20              # reports printed per process; the summaries still count them all
PLANT_TIMEOUT_S = 120         # a plant is one tiny kernel (and a compile): longer is a hang
TOOLKIT_HOMES = ("/usr/local/cuda",)   # searched after CUDA_HOME and CUDA_PATH
SANITIZER_ENV = "TORCHLEAN_SANITIZER"   # set to the tool's name in the processes it checks


class SanitizerNotFound(Exception):
    pass


class UnknownSanitizerTool(Exception):
    pass


class SanitizeUsageError(Exception):
    pass


def _env_number(env, name: str, default: float, what: str, kind=int):
    """A number from the environment; a value that is not one is a usage error naming it."""
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if value < 0:
        raise SanitizeUsageError(f"{name} is '{text}'; expected {what}")
    return value


def find_sanitizer(env=os.environ) -> str:
    """The compute-sanitizer executable: TORCHLEAN_COMPUTE_SANITIZER, PATH, then the toolkit's
    usual homes."""
    given = env.get("TORCHLEAN_COMPUTE_SANITIZER")
    if given:
        if Path(given).is_file() and os.access(given, os.X_OK):
            return given
        raise SanitizerNotFound(
            f"TORCHLEAN_COMPUTE_SANITIZER is '{given}', which is not an executable file; expected "
            f"the path of compute-sanitizer (it is part of the CUDA toolkit), or unset it to "
            f"search PATH and the toolkit")
    found = shutil.which("compute-sanitizer", path=env.get("PATH"))
    if found:
        return found
    homes = [env[v] for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)] + list(TOOLKIT_HOMES)
    for home in homes:
        for rel in ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"):
            if (Path(home) / rel).is_file():
                return str(Path(home) / rel)
    raise SanitizerNotFound(
        "compute-sanitizer was not found on PATH nor under "
        f"{', '.join(homes)}: it is part of the CUDA toolkit (install the toolkit, or your CUDA "
        "version's cuda-sanitizer package), then put its bin/ on PATH or set "
        "TORCHLEAN_COMPUTE_SANITIZER to the executable")


def parse_tools(text: str) -> list[str]:
    tools = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in tools if t not in SL.TOOLS]
    if unknown or not tools:
        raise UnknownSanitizerTool(
            f"sanitizer tools '{text}': {', '.join(unknown) or 'none given'} not known; expected "
            f"a comma-separated subset of {','.join(SL.TOOLS)}")
    return tools


def expand_args(args: list[str], root: Path = REPO) -> list[str]:
    """@FILE arguments replaced by the file's non-blank, non-comment lines."""
    out = []
    for arg in args:
        if arg.startswith("@"):
            lines = (root / arg[1:]).read_text().splitlines()
            out += [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        else:
            out.append(arg)
    return out


def _run(cmd: list[str], log_path: Path, timeout: float | None,
         tool: str, kernel_log: Path | None = None) -> tuple[int, bool]:
    """Run cmd in its own process group, output to log_path; (status, timed out). On a timeout
    the whole group (pytest's workers too) is stopped. SANITIZER_ENV names the tool, so the GPU
    test that runs the plants plainly skips itself instead of reporting them as its own errors;
    kernel_log is where each test process lists the native kernels it ran (tests/conftest.py)."""
    env = {**os.environ, SANITIZER_ENV: tool}
    if kernel_log is not None:
        env[SK.KERNEL_LOG_ENV] = str(kernel_log)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return proc.returncode, True


def _sanitizer_cmd(exe: str, tool: str, log_dir: Path, extra: list[str]) -> list[str]:
    """The sanitizer's command line, its log directory emptied first (an earlier run's logs
    would be counted again). %p: one log per process (pytest's workers are processes), and the
    workers' stdout stays free for pytest-xdist's own channel."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("sanitizer.*.log"):
        old.unlink()
    return [exe, "--tool", tool, "--target-processes", "all",
            "--error-exitcode", str(ERROR_EXITCODE), "--print-limit", str(PRINT_LIMIT),
            "--log-file", str(log_dir / "sanitizer.%p.log"), *extra]


def _logs(log_dir: Path) -> SL.Log:
    return SL.parse_processes([p.read_text(errors="replace")
                               for p in sorted(log_dir.glob("sanitizer.*.log"))])


def run_plant(exe: str, tool: str, out: Path, py: str, extra: list[str]) -> SL.PlantRun:
    log_dir = out / tool / "plant"
    driver_log = log_dir / "driver.log"
    rc, timed_out = _run(_sanitizer_cmd(exe, tool, log_dir, extra) + [py, PLANT, tool],
                         driver_log, PLANT_TIMEOUT_S, tool)
    text = driver_log.read_text(errors="replace")
    return SL.PlantRun(tool=tool, log=_logs(log_dir),
                       launched=any(ln.startswith("plant launched:") for ln in text.splitlines()),
                       returncode=rc, output_tail="\n".join(text.splitlines()[-15:]),
                       log_path=str(log_dir), timed_out=timed_out)


def junit_counts(path: Path) -> tuple[int | None, int, int]:
    """(passed, failed + errored, skipped) from a JUnit report; passed None when there is none."""
    if not path.is_file():
        return None, 0, 0
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = failed = skipped = 0
    for s in suites:
        total += int(s.get("tests", 0))
        failed += int(s.get("failures", 0)) + int(s.get("errors", 0))
        skipped += int(s.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def run_tests(exe: str, tool: str, out: Path, py: str, extra: list[str], pytest_args: list[str],
              workers: int, timeout: float | None) -> SL.TestRun:
    log_dir = out / tool / "tests"
    sanitizer = _sanitizer_cmd(exe, tool, log_dir, extra)
    junit = log_dir / "junit.xml"
    junit.unlink(missing_ok=True)
    cmd = [py, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
           f"--junitxml={junit}"]
    cmd += ["-n", str(workers)] if workers > 0 else ["-p", "no:xdist"]
    kernel_log = log_dir / "kernels"
    for old in kernel_log.glob("kernels.*.txt"):
        old.unlink()
    rc, timed_out = _run(sanitizer + cmd + pytest_args, log_dir / "pytest.log", timeout, tool,
                         kernel_log)
    passed, failed, skipped = junit_counts(junit)
    return SL.TestRun(log=_logs(log_dir), passed=passed, failed=failed, skipped=skipped,
                      timed_out=timeout if timed_out else None, log_path=str(log_dir),
                      flagged=rc == ERROR_EXITCODE,
                      kernels=SK.coverage_line(SK.all_kernels(REPO), SK.reached(kernel_log)))


def _default_workers() -> int:
    try:
        import xdist  # noqa: F401
        return 4
    except ImportError:
        return 0


def main(argv=None, env=os.environ) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    try:
        workers = _env_number(env, "TORCHLEAN_SANITIZE_WORKERS", _default_workers(),
                              "a whole number of pytest-xdist workers (0: one process)")
        limit = _env_number(env, "TORCHLEAN_SANITIZE_TIMEOUT", 0.0,
                            "seconds for each tool's test run (0: no limit)", float)
        parallel = _env_number(env, "TORCHLEAN_SANITIZE_PARALLEL", 0,
                               "0 (one tool at a time) or 1 (side by side)")
        if parallel > 1:
            raise SanitizeUsageError(f"TORCHLEAN_SANITIZE_PARALLEL is '{parallel}'; expected 0 "
                                     "(one tool at a time) or 1 (side by side)")
    except SanitizeUsageError as exc:
        print(f"sanitize.py: SanitizeUsageError: {exc}", file=sys.stderr)
        return 2
    p.add_argument("--tools", default=env.get("TORCHLEAN_SANITIZE_TOOLS", ",".join(SL.TOOLS)))
    p.add_argument("--workers", type=int, default=workers)
    p.add_argument("--timeout", type=float, default=limit)
    p.add_argument("--parallel", action="store_true", default=bool(parallel),
                   help="run the tools side by side, each with --workers pytest workers")
    p.add_argument("--out", default=str(Path(env.get("OUT") or "/tmp") / "sanitize"))
    p.add_argument("pytest_args", nargs="*")
    args = p.parse_args(argv)
    try:
        tools = parse_tools(args.tools)
    except UnknownSanitizerTool as exc:
        print(f"sanitize.py: UnknownSanitizerTool: {exc}", file=sys.stderr)
        return 2
    pytest_args = args.pytest_args or shlex.split(env.get("TORCHLEAN_SANITIZE_TESTS", "tests/"))
    try:
        pytest_args = expand_args(pytest_args)
    except OSError as exc:
        print(f"sanitize.py: cannot read a test list given as @FILE: {exc}; expected a file of "
              f"pytest node ids, relative to the repository", file=sys.stderr)
        return 2
    try:
        exe = find_sanitizer(env)
    except SanitizerNotFound as exc:
        print(f"sanitize.py: SanitizerNotFound: {exc}", file=sys.stderr)
        return 1
    out, py = Path(args.out), sys.executable
    extra = shlex.split(env.get("TORCHLEAN_SANITIZE_OPTIONS", ""))
    timeout = args.timeout or None

    def run_tool(tool: str) -> SL.ToolResult:
        start = time.monotonic()
        print(f"== {tool}: the plant", flush=True)
        plant = run_plant(exe, tool, out, py, extra)
        failures = SL.plant_failures(plant)
        tests = None
        if not failures:   # a tool that missed its plant would make the tests' verdict empty
            print(f"== {tool}: pytest -m cuda {' '.join(pytest_args)}", flush=True)
            tests = run_tests(exe, tool, out, py, extra, pytest_args, args.workers, timeout)
            failures += SL.test_failures(tool, tests)
        print(f"   {tool}: {'ok' if not failures else 'FAILED'}", flush=True)
        return SL.ToolResult(tool, plant, tests, failures, time.monotonic() - start)

    if args.parallel:
        # each tool's runs are child processes with their own logs and kernel log: nothing is
        # shared but the GPU, so the tools can run side by side (the table keeps their order)
        with ThreadPoolExecutor(max_workers=len(tools)) as pool:
            results = list(pool.map(run_tool, tools))
    else:
        results = [run_tool(tool) for tool in tools]
    print("\n== sanitizer summary")
    print(SL.table(results))
    print(f"logs: {out}")
    return 0 if all(not r.failures for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
