"""The ulp table of an evidence directory (`torchlean-conformance ulp-table`, its ulp-table.json:
conformance/ulp_table/table.py) as a section of the "verified by exhaustion" page: functions down,
the implementations and NVIDIA's documented figure across, each cell its maximum ulps with the
same marks as the console's table, the reason of every n/a cell, and one line of detail per swept
cell folded below (readable without JavaScript, and at 1024 px: short cells only)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.evidence import cuda_versions
from conformance.formats import ULP_TABLE_FORMAT
from conformance.jsonfile import RefusedFile, read_json
from conformance.ulp_table.table import NVIDIA, TABLE_VERSION, cell_text, detail

TABLE_FILE = "ulp-table.json"


@dataclass
class UlpCell:
    text: str
    title: str               # the cell's detail or its n/a reason (a tooltip)
    bad: bool = False        # beyond its documented figure, or its sweep did not finish
    na: bool = False


@dataclass
class UlpRow:
    function: str
    formula: str
    cells: list[UlpCell]
    nvidia: UlpCell
    variant: bool = False


@dataclass
class UlpTableView:
    caption: str
    columns: list[str]
    rows: list[UlpRow]
    reasons: list[str] = field(default_factory=list)    # "reason: where" for the n/a cells
    details: list[str] = field(default_factory=list)
    created: str = ""
    seconds: float = 0.0


def _cell(c: dict) -> UlpCell:
    if "na" in c:
        return UlpCell("n/a", c["na"], na=True)
    finished = c.get("status") in ("passed", "failed")
    return UlpCell(cell_text(c), detail(c).strip(),
                   bad=(not finished) or c.get("within_documented") is False or
                   c.get("inputs", 0) < c.get("patterns", 0))


def _nvidia(n: dict) -> UlpCell:
    if "na" in n:
        return UlpCell("n/a", n["na"], na=True)
    return UlpCell(f"{n['documented_ulps']:g} ({n['function']})", n.get("source", ""))


def read_table(directory: Path) -> tuple[UlpTableView | None, str | None]:
    """(the view, None), (None, why the file is unusable), or (None, None) without a file."""
    path = Path(directory) / TABLE_FILE
    if not path.is_file():
        return None, None
    try:
        doc = read_json(path, inside=directory)
    except (RefusedFile, ValueError) as exc:
        return None, f"{TABLE_FILE}: cannot be read ({exc}); rerun `torchlean-conformance " \
                     "ulp-table`"
    if not isinstance(doc, dict) or doc.get("format") != ULP_TABLE_FORMAT or \
            doc.get("version") != TABLE_VERSION:
        return None, f"{TABLE_FILE}: not an ulp table of this version; rerun " \
                     "`torchlean-conformance ulp-table`"
    return view(doc), None


def view(doc: dict) -> UlpTableView:
    env = doc.get("environment") or {}
    where = (f"{env.get('gpu')}, {cuda_versions(env)}" if doc.get("device") == "cuda"
             else "the CPU (NumPy)")
    columns = doc.get("columns") or []
    rows, reasons, details = [], {}, []
    for row in doc.get("rows") or []:
        cells = []
        for col in columns:
            c = (row.get("cells") or {}).get(col["name"]) or {"na": "not in the table"}
            cells.append(_cell(c))
            if "na" in c:
                reasons.setdefault(c["na"], []).append(f"{col['title']} {row['function']}")
            else:
                details.append(detail(c).strip())
        rows.append(UlpRow(row["function"], row.get("formula", ""), cells,
                           _nvidia(row.get(NVIDIA) or {"na": "?"})))
        for col_i, col in enumerate(columns):
            for name, c in ((row.get("variants") or {}).get(col["name"]) or {}).items():
                blank = [UlpCell("", "") for _ in columns]
                blank[col_i] = _cell(c)
                rows.append(UlpRow(f"{row['function']} .{name}", f"{col['title']}'s {name} "
                                   "variant", blank, UlpCell("", ""), variant=True))
                details.append(detail(c).strip())
    return UlpTableView(
        f"{where}: {doc.get('coverage')}; {doc.get('measure')}",
        [c["title"] for c in columns], rows,
        [f"{why}: {', '.join(where_)}" for why, where_ in reasons.items()], details,
        str(doc.get("created", "")), float(doc.get("seconds", 0.0)))
