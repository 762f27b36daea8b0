"""`torchlean-conformance report [--evidence-dir DIR ...] [--out DIR]`: evidence directories in,
static HTML out (reports/out/index.html by default)."""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

from reports.builder import build_report
from reports.current import BuildView
from reports.writer import write_report

DEFAULT_EVIDENCE_ROOT = Path("reports") / "evidence"
DEFAULT_OUT = Path("reports") / "out"


class ReportInputError(Exception):
    """Evidence directories that do not exist, or none at all."""


def default_evidence_dirs(root: Path = DEFAULT_EVIDENCE_ROOT) -> list[Path]:
    """Every reports/evidence/<device>/ that exists, in name order."""
    return sorted(p for p in Path(root).glob("*") if p.is_dir()) if Path(root).is_dir() else []


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


def render_report(evidence_dirs: list[str], out_dir: str, build: BuildView | None = None,
                  generated: str | None = None) -> Path:
    """Build the model from the directories and write the pages; returns index.html's path.
    `build` says what the current build is (default: this checkout's registry)."""
    missing = [d for d in evidence_dirs if not Path(d).is_dir()]
    if missing:
        raise ReportInputError(f"evidence directory {', '.join(map(str, missing))} does not exist; "
                               "run `torchlean-conformance run` first or pass --evidence-dir")
    if build is None:
        from reports.current import RegistryBuild
        build = RegistryBuild()
    report = build_report([Path(d) for d in evidence_dirs], build)
    return write_report(report, Path(out_dir), generated or generated_line())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchlean-conformance report",
                                description=__doc__.split("\n")[0])
    p.add_argument("--evidence-dir", action="append", metavar="DIR",
                   help="an evidence directory, one column group each (repeatable); default: "
                        "every reports/evidence/<device>/")
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help="output directory (default reports/out/)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dirs = args.evidence_dir or [str(p) for p in default_evidence_dirs()]
    if not dirs:
        print(f"torchlean-conformance report: no evidence directory under "
              f"{DEFAULT_EVIDENCE_ROOT}/; run `torchlean-conformance run` first or pass "
              "--evidence-dir", file=sys.stderr)
        return 2
    try:
        index = render_report(dirs, args.out)
    except ReportInputError as exc:
        print(f"torchlean-conformance report: {exc}", file=sys.stderr)
        return 2
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
