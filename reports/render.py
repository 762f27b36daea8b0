"""`torchlean-conformance report [--evidence-dir DIR ...] [--out DIR]` (the same as
`torchlean-report report ...`, reports/cli.py): evidence directories in, static HTML out
(reports/out/index.html by default).

Exit status: 0 when every file was used; 1 when some evidence file could not be used (each is
named on stderr and on the index, and every other capsule is still rendered); 2 for a usage
error (no evidence directory, one that does not exist or is a file, or a --plugin the report
cannot use); 4 when the pages cannot be written (a full disk: the previous pages are kept
whole)."""
from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import sys
from pathlib import Path

from conformance.evidence_dir import DEFAULT_EVIDENCE_ROOT, default_evidence_dirs, unwritable
from conformance.exit_codes import EXIT_ENVIRONMENT, EnvironmentFailure
from reports.builder import build_report
from reports.current import BuildView
from reports.model import Unusable
from reports.plugin_sources import PluginLoadFailed
from reports.writer import write_report

PROG = "torchlean-conformance report"

DEFAULT_OUT = Path("reports") / "out"


class ReportInputError(Exception):
    """Evidence directories that do not exist, or one given twice."""


def generated_line() -> str:
    """The footer: the only time- and version-dependent text on the pages."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        ours = version("torchlean-cuda-runtime")
    except PackageNotFoundError:
        ours = "unknown"
    import jinja2
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return f"generated {now} by torchlean-conformance report {ours} (jinja2 {jinja2.__version__})"


def render(evidence_dirs: list[str], out_dir: str, build: BuildView | None = None,
           generated: str | None = None,
           plugins: list[str] = ()) -> tuple[Path, list[Unusable]]:
    """Build the model from the directories and write the pages: (index.html's path, every file
    that could not be used). `build` says what the current build is (default: this checkout's
    registry); `plugins` the plugins the user lets the report describe in a kernel process, to
    recompute their capsules' fingerprints (reports/plugin_sources.py)."""
    files = [d for d in evidence_dirs if Path(d).exists() and not Path(d).is_dir()]
    if files:
        f = Path(files[0])
        raise ReportInputError(
            f"--evidence-dir {files[0]} is a file, not a directory; pass the directory that holds "
            f"the evidence records, e.g. the one this file is in: --evidence-dir "
            f"{shlex.quote(str(f.parent))}")
    missing = [d for d in evidence_dirs if not Path(d).is_dir()]
    if missing:
        raise ReportInputError(f"evidence directory {', '.join(map(str, missing))} does not exist; "
                               "run `torchlean-conformance run` first or pass --evidence-dir")
    seen: dict[Path, str] = {}
    for d in evidence_dirs:
        if Path(d).resolve() in seen:
            raise ReportInputError(f"evidence directory {d} is given twice (also as "
                                   f"{seen[Path(d).resolve()]}); give each directory once")
        seen[Path(d).resolve()] = str(d)
    if build is None:
        from reports.current import RegistryBuild
        build = RegistryBuild()
    try:
        report = build_report([Path(d) for d in evidence_dirs], build, plugins)
    except PluginLoadFailed as exc:
        raise ReportInputError(f"{exc}; or leave --plugin out (the report then runs no plugin "
                               "code, and tells a plugin's freshness only where the trust "
                               "export proves it)") from None
    # The output last (reading wrote nothing): a refused command creates nothing, and no page
    # is rendered for nothing.
    problem = unwritable(Path(out_dir))
    if problem:
        raise ReportInputError(f"--out {out_dir}: {problem}; pass a directory you can write (it "
                               "is created when missing)")
    return write_report(report, Path(out_dir), generated or generated_line()), report.unusable


def render_report(evidence_dirs: list[str], out_dir: str, build: BuildView | None = None,
                  generated: str | None = None, plugins: list[str] = ()) -> Path:
    """`render`, for callers that only need the index (the unusable files are on it)."""
    return render(evidence_dirs, out_dir, build, generated, plugins)[0]


def warning_line(u: Unusable) -> str:
    return f"{PROG}: warning: {u.line()}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("\n", " "),
                                epilog=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--evidence-dir", action="extend", nargs="+", metavar="DIR",
                   help="evidence directories, one evidence column each (several after one flag, "
                        "or the flag repeated); default: every reports/evidence/<device>/")
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help="output directory (default reports/out/)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE:ATTR",
                   help="a plugin whose records' freshness the report may recompute: it is "
                        "described by a kernel process of its own, as export-trust does, which "
                        "runs its code; without it the report runs no plugin code and calls a "
                        "plugin's evidence fresh only where the trust export proves it "
                        "(repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dirs = args.evidence_dir or [str(p) for p in default_evidence_dirs()]
    if not dirs:
        print(f"{PROG}: no evidence directory under {DEFAULT_EVIDENCE_ROOT}/; run "
              "`torchlean-conformance run` first or pass --evidence-dir", file=sys.stderr)
        return 2
    try:
        index, unusable = render(dirs, args.out, plugins=args.plugin)
    except ReportInputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except EnvironmentFailure as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    for u in unusable:
        print(warning_line(u), file=sys.stderr)
    print(index)
    return 1 if unusable else 0


if __name__ == "__main__":
    sys.exit(main())
