"""The page "compile-flag matrix": for each evidence directory holding a flag-matrix.json
(`torchlean-conformance flags`, conformance/flag_matrix.py), every native-cuda capsule down and each
NVRTC flag set across, judged against the policy its own build declares and, for the sets other
than default, against the default build's policy; each cell's verdict, its first failure reason,
what the expectation rule asked of it and whether that was met."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.flag_matrix import MATRIX_FILE, MODES, OWN, SCHEMA_VERSION
from conformance.formats import FLAG_MATRIX_FORMAT
from conformance.jsonfile import RefusedFile, read_json
from reports import names
from reports.model import Unusable


@dataclass
class FlagColumn:
    flag_set: str
    mode: str
    label: str


@dataclass
class FlagCell:
    status: str
    reason: str | None
    expect: str              # pass, fail or either
    why: str
    met: bool | None         # None: `either`, no expectation


@dataclass
class FlagSet:
    name: str
    options: str
    fingerprint: str
    modes: int               # columns it spans: 1 (default) or 2


@dataclass
class FlagSection:
    directory: object        # reports.model.Directory
    sets: list[FlagSet]
    columns: list[FlagColumn]
    rows: list[tuple[str, str | None, list[FlagCell]]]   # capsule, its page, cells
    counts: dict
    unmet: list[str]
    settings: str


@dataclass
class FlagsPage:
    page: str
    title: str
    sections: list[FlagSection]


def _settings(s: dict) -> str:
    parts = ["quick" if s.get("quick") else f"cases {s.get('cases') or 'default'}",
             f"seed {s.get('seed')}"]
    if s.get("exhaustive"):
        parts.append(f"exhaustive sweep, stride {s.get('stride')}")
    return ", ".join(parts)


def _section(directory, doc: dict, pages: dict) -> FlagSection:
    sets, columns = [], []
    for s in doc["sets"]:
        modes = (OWN,) if s["name"] == "default" else MODES
        sets.append(FlagSet(s["name"], " ".join(s["options"]), s["fingerprint"][:12], len(modes)))
        columns += [FlagColumn(s["name"], m, "own policy" if m == OWN else "default policy")
                    for m in modes]
    rows = []
    for r in doc["rows"]:
        cells = []
        for c in columns:
            cell = r["cells"][c.flag_set][c.mode]
            cells.append(FlagCell(cell["status"], cell.get("reason"), cell["expect"],
                                  cell["why"], cell.get("met")))
        rows.append((r["capsule"], pages.get(r["capsule"]), cells))
    return FlagSection(directory, sets, columns, rows, doc["counts"], doc["unmet"],
                       _settings(doc.get("settings") or {}))


def build_flags(report) -> FlagsPage | None:
    """The page, or None when no directory holds a flag matrix. A matrix that cannot be read is
    one of its directory's unusable files (the report then exits 1)."""
    pages = {r.info.name: r.page for r in report.rows}
    sections = []
    for directory in report.directories:
        path = Path(directory.path) / MATRIX_FILE
        if not path.is_file():
            continue
        try:
            doc = read_json(path, inside=directory.path)
            if doc.get("format") != FLAG_MATRIX_FORMAT or doc.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"format {doc.get('format')!r} version "
                                 f"{doc.get('schema_version')!r}, expected {FLAG_MATRIX_FORMAT!r} version "
                                 f"{SCHEMA_VERSION}")
            sections.append(_section(directory, doc, pages))
        except (RefusedFile, ValueError, KeyError, TypeError, AttributeError) as exc:
            directory.unusable.append(Unusable(
                str(path), f"not a readable flag matrix ({type(exc).__name__}: {exc})",
                "run `torchlean-conformance flags` again to rewrite it"))
    if not sections:
        return None
    return FlagsPage(names.FLAGS_PAGE, "compile-flag matrix", sections)

