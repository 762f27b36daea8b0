"""The `torchlean-report` command (also `python -m reports`): `report` renders the static HTML
evidence report (reports/render.py), `trust-boundaries` regenerates or checks TRUST_BOUNDARIES.md's
capsule table (reports/trust_boundaries.py). Each subcommand takes its module's arguments and
returns its module's exit code.

`torchlean-conformance report|trust-boundaries` runs this command in a child process: reports
imports conformance, so conformance never imports reports (tests/test_import_graph.py).
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable


def _report(argv: list[str]) -> int:
    from reports import render   # imported when its subcommand runs: start-up stays cheap
    return render.main(argv)


def _trust_boundaries(argv: list[str]) -> int:
    from reports import trust_boundaries
    return trust_boundaries.main(argv)


# name -> (main(argv) -> exit code, one line of help)
SUBCOMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "report": (_report, "render the static HTML evidence report"),
    "trust-boundaries": (_trust_boundaries,
                         "regenerate (or --check) the capsule table of TRUST_BOUNDARIES.md"),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser `--help` and a missing or unknown subcommand meet; a known subcommand's
    arguments go to its own parser untouched (argparse's REMAINDER drops leading options)."""
    from engine.cli import version
    parser = argparse.ArgumentParser(prog="torchlean-report",
                                     description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; what it prints may meet a reader that left (`| head`): the printing
    stops, the exit code stands (conformance.progress.reader_may_leave)."""
    from conformance.progress import reader_may_leave
    argv = sys.argv[1:] if argv is None else list(argv)
    with reader_may_leave():
        if argv and argv[0] in SUBCOMMANDS:
            return SUBCOMMANDS[argv[0]][0](argv[1:])
        # --help, --version or a usage error exit here; what parses names a subcommand after
        # something else (`-- report`), and its own parser gets the rest
        args, rest = build_parser().parse_known_args(argv)
        return SUBCOMMANDS[args.command][0](rest)


if __name__ == "__main__":
    sys.exit(main())
