"""Reading compute-sanitizer's output, and the verdict of one tool's runs (scripts/sanitize.py
runs them; this module only reads text and decides, so the CPU tests cover all of it).

What is read, liberally (each line may carry the "========= " prefix or not, counts may be singular
or plural, "initialised" either spelling):
  - "ERROR SUMMARY: N error(s)": one per process; the counts are summed over the processes.
    "ERROR SUMMARY: N errors were not displayed due to --print-limit" restates part of the count
    and is not added again.
  - "RACECHECK SUMMARY: H hazard(s) displayed (E error(s), W warning(s))": racecheck's own summary.
    A process's count is the larger of its ERROR SUMMARY and its racecheck errors + warnings (a
    warning is a hazard racecheck thinks may be benign; it is still a report, and this job fails
    on any report).
  - the headline of each report ("Invalid __global__ write of size 4 bytes", "Error: Race reported
    between ...", "Uninitialized __global__ memory read ...", "Barrier error detected ...",
    "Program hit cudaErrorX ..."): what kinds were seen, and whether a tool's plant was reported.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

_PREFIX = re.compile(r"^=+ ?")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?\b(?!.*not displayed)",
                            re.IGNORECASE)
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*"
                           r"\(\s*(\d+)\s+errors?\s*,\s*(\d+)\s+warnings?\s*\)", re.IGNORECASE)
# lines of the sanitizer's own that are not reports
_NOT_A_REPORT = re.compile(r"^(COMPUTE-SANITIZER|CUDA-MEMCHECK|ERROR SUMMARY|RACECHECK SUMMARY|"
                           r"LEAK SUMMARY|Target application returned|Saved host backtrace|"
                           r"Device Frame|Host Frame|Address|Tool|Note|Internal)", re.IGNORECASE)
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_NUMBERED = re.compile(r"\(\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\)")   # thread and block coordinates

# tool -> the headline of its plant's report (tests/sanitizer/planted.cu), old and new wordings
PLANT_REPORTS = {
    "memcheck": re.compile(r"Invalid __global__ write of size \d+ bytes?", re.IGNORECASE),
    "racecheck": re.compile(r"(Race reported between|Potential (RAW|WAR|WAW) hazard)",
                            re.IGNORECASE),
    "initcheck": re.compile(r"Uninitiali[sz]ed __global__ memory read", re.IGNORECASE),
    "synccheck": re.compile(r"(Barrier error detected|Divergent thread\(s\) in (block|warp))",
                            re.IGNORECASE),
}


@dataclass
class Log:
    """What one process's (or one combined) sanitizer output says."""
    errors: int = 0              # reports counted, summed over processes
    summaries: int = 0           # ERROR/RACECHECK SUMMARY lines seen: 0 means the tool never ran
    headlines: Counter = field(default_factory=Counter)

    def __iadd__(self, other: "Log") -> "Log":
        self.errors += other.errors
        self.summaries += other.summaries
        self.headlines.update(other.headlines)
        return self


def _headline(line: str) -> str | None:
    """A report's first line with addresses and coordinates blanked, or None for other lines."""
    if not line.startswith("="):
        return None
    body = _PREFIX.sub("", line.rstrip())
    if not body or body[0].isspace() or _NOT_A_REPORT.match(body):
        return None
    return _NUMBERED.sub("(...)", _HEX.sub("0x..", body))


def parse(text: str) -> Log:
    """One process's output (or several processes' output with one summary block each)."""
    log = Log()
    error_summary = race_summary = 0
    for line in text.splitlines():
        body = _PREFIX.sub("", line.strip())
        if m := _ERROR_SUMMARY.search(body):
            error_summary += int(m.group(1))
            log.summaries += 1
        elif m := _RACE_SUMMARY.search(body):
            race_summary += int(m.group(2)) + int(m.group(3))
            log.summaries += 1
        elif (headline := _headline(line.strip())) is not None:
            log.headlines[headline] += 1
    log.errors = max(error_summary, race_summary)
    return log


def parse_processes(texts: list[str]) -> Log:
    """The logs of several processes (one file each, --log-file with %p), summed."""
    total = Log()
    for text in texts:
        total += parse(text)
    return total


# -- the verdict -------------------------------------------------------------------------------

class SanitizeFailure(Exception):
    """One reason a tool's run fails; its message says what happened and what to do."""


class PlantNotReported(SanitizeFailure):
    pass


class PlantDriverFailed(SanitizeFailure):
    pass


class SanitizerReportedErrors(SanitizeFailure):
    pass


class SanitizerSummaryMissing(SanitizeFailure):
    pass


class TestsFailed(SanitizeFailure):
    pass


class NoTestsRan(SanitizeFailure):
    pass


class RunTimedOut(SanitizeFailure):
    pass


@dataclass
class PlantRun:
    tool: str
    log: Log
    launched: bool       # the driver printed its "plant launched" line
    returncode: int
    output_tail: str     # the driver's last lines, for a failure message
    log_path: str
    timed_out: bool = False   # stopped after the plant's time limit (a hang)


@dataclass
class TestRun:
    log: Log
    passed: int | None   # None: pytest wrote no JUnit report (it crashed or was killed)
    failed: int
    skipped: int
    timed_out: float | None   # the limit it ran past, in seconds
    log_path: str
    flagged: bool = False     # compute-sanitizer exited with its --error-exitcode
    kernels: str = ""         # sanitize_kernels.coverage_line: the native kernels reached


def plant_failures(run: PlantRun) -> list[SanitizeFailure]:
    """Why this plant run does not prove the tool is checking kernels (empty: it does)."""
    if not run.launched:
        return [PlantDriverFailed(
            f"the {run.tool} plant was never launched: tests/sanitizer/plant.py {run.tool} "
            f"{'was stopped at its time limit' if run.timed_out else 'exited'} "
            f"with status {run.returncode} before its kernel ran (is CuPy importable and a GPU "
            f"visible under the sanitizer?); its output ends:\n{run.output_tail}")]
    wanted = PLANT_REPORTS[run.tool]
    if run.log.errors > 0 and any(wanted.search(h) for h in run.log.headlines):
        return []
    seen = ", ".join(sorted(run.log.headlines)) or "no report at all"
    hung = " (the plant was stopped at its time limit: a hang)" if run.timed_out else ""
    return [PlantNotReported(
        f"{run.tool} ran its plant (tests/sanitizer/plant.py {run.tool}) but did not report it"
        f"{hung}: expected a report matching '{wanted.pattern}' and at least one error, got "
        f"{run.log.errors} error(s) and {seen}; the tool is not checking kernels here, so its "
        f"clean runs would prove nothing (check compute-sanitizer's version supports this GPU): "
        f"see {run.log_path}")]


def test_failures(tool: str, run: TestRun) -> list[SanitizeFailure]:
    """Why this tool's run of the tests fails (empty: it passes)."""
    out: list[SanitizeFailure] = []
    if run.timed_out is not None:
        out.append(RunTimedOut(
            f"the tests under {tool} ran past {run.timed_out:g} s and were stopped; what the "
            f"sanitizer logged until then is counted. Select fewer tests "
            f"(TORCHLEAN_SANITIZE_TESTS) or raise TORCHLEAN_SANITIZE_TIMEOUT"))
    if run.log.errors:
        kinds = "; ".join(f"{n} x {h}" for h, n in run.log.headlines.most_common(5))
        out.append(SanitizerReportedErrors(
            f"{tool} reported {run.log.errors} error(s) in the tests ({kinds or 'no headline'}); "
            f"each report names its kernel and call stack in {run.log_path}"))
    elif run.flagged:
        out.append(SanitizerReportedErrors(
            f"{tool} exited with its error status, so it reported something, but its logs hold "
            f"no error count this script could read (has the summary's wording changed?): read "
            f"{run.log_path} and fix scripts/sanitize_log.py"))
    elif run.log.summaries == 0 and run.timed_out is None:
        out.append(SanitizerSummaryMissing(
            f"{tool} printed no ERROR SUMMARY for the tests, so it did not check them (did "
            f"compute-sanitizer start, and were its logs written?): see {run.log_path}"))
    if run.passed is None:
        if run.timed_out is None:
            out.append(TestsFailed(
                f"pytest under {tool} wrote no JUnit report: it crashed or was killed; see "
                f"{run.log_path}"))
    elif run.failed:
        out.append(TestsFailed(
            f"{run.failed} test(s) failed or errored under {tool}; see {run.log_path}"))
    elif run.passed == 0:
        out.append(NoTestsRan(
            f"no test passed under {tool} ({run.skipped} skipped): a run that checks nothing "
            f"proves nothing; is the native CUDA runtime available under the sanitizer, and does "
            f"the selection (TORCHLEAN_SANITIZE_TESTS) name GPU tests?"))
    return out


# -- the table ---------------------------------------------------------------------------------

@dataclass
class ToolResult:
    tool: str
    plant: PlantRun
    tests: TestRun | None          # None: not run, the plant was not reported
    failures: list[SanitizeFailure]
    seconds: float = 0.0           # wall time of the plant and the tests under this tool


def _tests_cell(run: TestRun | None) -> str:
    if run is None:
        return "not run"
    if run.passed is None:
        return "no report" + (" (timed out)" if run.timed_out is not None else "")
    cell = f"{run.passed}/{run.failed}/{run.skipped}"
    return cell + (" (timed out)" if run.timed_out is not None else "")


def table(results: list[ToolResult]) -> str:
    """One row per tool: the plant (detected, with the errors it drew), the tests
    passed/failed/skipped, the errors reported in them, the wall time, the verdict; then each
    failure's message."""
    head = ("tool", "plant detected", "tests passed/failed/skipped", "sanitizer errors",
            "time", "verdict")
    rows = [head]
    for r in results:
        missed = any(isinstance(f, (PlantNotReported, PlantDriverFailed)) for f in r.failures)
        plant = f"{'NO' if missed else 'yes'} ({r.plant.log.errors})"
        errors = "-" if r.tests is None else str(r.tests.log.errors)
        rows.append((r.tool, plant, _tests_cell(r.tests), errors, f"{r.seconds:.0f} s",
                     "ok" if not r.failures else "FAILED"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for r in results:
        for f in r.failures:
            lines.append(f"{r.tool}: {type(f).__name__}: {f}")
    for r in results:
        if r.tests is not None and r.tests.kernels:
            lines.append(f"{r.tool}: {r.tests.kernels}")
    return "\n".join(lines)
