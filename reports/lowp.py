"""The page "16-bit kernels": the records of `torchlean-conformance lowp` (files lowp-<kernel>.json)
in every evidence directory: per kernel its format, op, declared bound and accumulation, what was
judged (all 2^16 inputs, or the cases of a run seed), the verdict, the failure reasons and the
first counterexample of each."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.formats import LOWP_FORMAT
from reports import names
from reports.exhaustive import read_tagged


@dataclass
class LowpView:
    kernel: str
    storage: str
    op: str
    bound: str
    judged: str                     # all 2^16 inputs, or N cases of seed S
    status: str
    reasons: list[tuple[str, int]]
    example: str | None             # the first counterexample, in words
    message: str | None
    plugin: str | None


@dataclass
class LowpSection:
    directory: object
    kernels: list[LowpView]
    unusable: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)   # the --plugin specs the records name


@dataclass
class LowpPage:
    page: str
    title: str
    sections: list[LowpSection]


def _example(c: dict) -> str:
    where = (f"input {c.get('input')} ({c.get('input_value')})" if "input" in c else
             f"{c.get('class')}[{c.get('index')}], shapes {c.get('shapes')}, element "
             f"{c.get('element')}")
    return (f"{where}: expected {c.get('expected')}, got {c.get('got')} ({c.get('got_value')}): "
            f"{c.get('reason')}")


def _view(rec: dict) -> LowpView:
    cases, run = rec.get("cases"), rec.get("run") or {}
    if isinstance(cases, dict):
        judged = (f"{cases.get('total')} cases ({rec.get('elements')} elements) of run seed "
                  f"{run.get('seed')} ({run.get('seed_source')})")
    elif rec.get("patterns"):
        judged = f"all {rec['patterns']} inputs"
    else:
        judged = "not judged"
    acc = rec.get("accumulation")
    bound = f"{rec.get('bound_ulps')} ulp" + (f", {acc} inside" if acc else "")
    examples = rec.get("counterexamples") or []
    reasons = rec.get("failure_reasons") or {}
    return LowpView(str(rec.get("kernel")), str(rec.get("storage")), str(rec.get("op")), bound,
                    judged, str(rec.get("status")),
                    [(str(k), int(v)) for k, v in reasons.items() if isinstance(v, int)],
                    _example(examples[0]) if examples and isinstance(examples[0], dict) else None,
                    rec.get("message") if isinstance(rec.get("message"), str) else None,
                    rec.get("plugin") if isinstance(rec.get("plugin"), str) else None)


def read_lowp(directory: Path) -> tuple[list[dict], list[str]]:
    return read_tagged(directory, "lowp-*.json", LOWP_FORMAT,
                       lambda doc: isinstance(doc.get("kernel"), str) and
                       isinstance(doc.get("failure_reasons"), dict),
                       "a 16-bit kernel's record", "torchlean-conformance lowp")


def build_lowp(report) -> LowpPage | None:
    """The page, or None when no directory holds a 16-bit kernel's record."""
    sections = []
    for directory in report.directories:
        recs, bad = read_lowp(Path(directory.path))
        if recs or bad:
            views = sorted((_view(r) for r in recs), key=lambda v: (v.storage, v.op, v.kernel))
            plugins = sorted({v.plugin for v in views if v.plugin})
            sections.append(LowpSection(directory, views, bad, plugins))
    return LowpPage(names.LOWP_PAGE, "16-bit kernels", sections) if sections else None
