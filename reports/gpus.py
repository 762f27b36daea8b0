"""The page "capsules x GPUs": evidence is per GPU model, driver and CUDA runtime, so with two
evidence directories or more that ran on a GPU (evidence/h200, evidence/h100, ...: `report
--evidence-dir A --evidence-dir B`), capsules go down and GPUs across (model, driver API and CUDA
runtime from the directory's records), each cell the trust that directory earned for the capsule
on that GPU, linked to the capsule page's section of that directory.

Verified by exhaustion counts per GPU: a cell says `verified` only when the directory's trust says
so and the directory holds its own exhaustive sweep of the capsule, passed, made on the column's
GPU model, driver and runtime (conformance/trust.py's rule, applied to each column). A directory
whose export says verified from a sweep of another GPU shows `checked` there, with the reason, so
an H200's sweep never makes an H100 column verified. With one GPU directory the index's own
column is the matrix, and no page is made."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from conformance.evidence import cuda_versions
from reports import names

ENV_KEYS = ("gpu", "driver", "cuda_runtime")   # what makes one GPU column (conformance/trust.py)
VERIFIED, CHECKED = "verified", "checked"
LEVELS = (VERIFIED, CHECKED, "fuzzed")          # the most claiming first, for the column counts


@dataclass
class GpuColumn:
    directory: object        # reports.model.Directory
    model: str
    versions: str            # "driver API 13.0, CUDA runtime 13.2"
    mixed: list[str]         # other environments among the directory's records (a warning)
    counts: list[tuple[str, int]]    # (earned label or "nothing", capsules)
    verified: int            # capsules verified by exhaustion on this GPU


@dataclass
class GpuCell:
    earned: str | None       # the trust shown (None: nothing earned)
    status: str | None       # the record's verdict; None: no record in this directory
    href: str | None         # the capsule page's section of this directory
    why: str                 # the hover text: why this trust
    note: str | None = None  # shown in the cell: a verified claim this GPU's sweep does not back


@dataclass
class GpuRow:
    name: str
    page: str
    cells: list[GpuCell]


@dataclass
class GpuMatrixPage:
    page: str
    title: str
    columns: list[GpuColumn]
    rows: list[GpuRow]
    unaudited: list[tuple[str, str]]     # (capsule, page): cuda capsules no column has evidence of


def _gpu_env(env) -> tuple:
    """(model, driver, runtime) of a record's environment; a value of the wrong type as None
    (reports/shapes.py lets a record with one through: it is shown, not judged)."""
    env = env if isinstance(env, dict) else {}
    gpu, driver, runtime = (env.get(k) for k in ENV_KEYS)

    def version(v):
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    return (gpu if isinstance(gpu, str) else None), version(driver), version(runtime)


def _env(ev) -> tuple:
    return _gpu_env(dict(ev.environment))


def _label(env: tuple) -> str:
    gpu, driver, runtime = env
    return f"{gpu}, {cuda_versions({'driver': driver, 'cuda_runtime': runtime})}"


def sweep_problem(directory_path: str, capsule: str, env: tuple) -> str | None:
    """Why this directory's own exhaustive sweep of `capsule` does not verify it on the GPU
    `env` = (model, driver, runtime); None when it does."""
    from conformance.exhaustive.plan import record_file
    from engine.errors import CapsuleNameError
    try:
        path = record_file(directory_path, capsule)
    except CapsuleNameError as exc:   # a record's name no sweep file can carry
        return f"no sweep record can exist for it ({exc})"
    if not path.is_file():
        return f"this directory holds no exhaustive sweep of it ({path.name})"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"its sweep record {path.name} cannot be read ({exc})"
    if not isinstance(rec, dict):
        return f"{path.name} is not a sweep record"
    if rec.get("mode") != "exhaustive" or rec.get("device") != "cuda":
        return "its sweep was sampled (--stride or --device cpu), not exhaustive"
    if rec.get("status") != "passed":
        return f"its exhaustive sweep has status `{rec.get('status')}`"
    ran = _gpu_env(rec.get("environment"))
    if ran != env:
        return f"its exhaustive sweep ran on {_label(ran)}, not on {_label(env)}"
    return None


def _cell(row, cell, env: tuple) -> GpuCell:
    ev = cell.evidence
    if ev is None:
        absent = cell.absent or "no evidence"
        return GpuCell(None, None, None, f"{absent} in {cell.directory.label}")
    href = f"{row.page}#{names.evidence_anchor(cell.directory.slug)}"
    if ev.earned != VERIFIED:
        return GpuCell(ev.earned, ev.status, href, ev.earned_why)
    problem = sweep_problem(cell.directory.path, row.info.name, env)
    if problem is None:
        return GpuCell(VERIFIED, ev.status, href, ev.earned_why)
    note = f"not verified on this GPU: {problem}"
    return GpuCell(CHECKED, ev.status, href, f"{ev.earned_why}; {note}", note)


def _gpu_columns(report) -> list[tuple[int, tuple, list[str]]]:
    """(index among the report's directories, the GPU environment most of its cuda records name,
    the other environments they name) of each directory with GPU records."""
    out = []
    for i, directory in enumerate(report.directories):
        envs = Counter(_env(c.evidence) for r in report.rows for c in [r.cells[i]]
                       if c.evidence is not None and c.evidence.capsule.device == "cuda")
        envs.pop((None, None, None), None)
        envs = Counter({e: n for e, n in envs.items() if e[0]})
        if envs:
            main, *others = [e for e, _ in envs.most_common()]
            out.append((i, main, [_label(e) for e in others]))
    return out


def build_gpus(report) -> GpuMatrixPage | None:
    """The page, or None when fewer than two evidence directories ran on a GPU."""
    found = _gpu_columns(report)
    if len(found) < 2:
        return None
    rows, unaudited = [], []
    for row in report.rows:
        cells = [row.cells[i] for i, _, _ in found]
        if not any(c.evidence for c in cells):
            if row.info.device == "cuda":
                unaudited.append((row.info.name, row.page))
            continue
        rows.append(GpuRow(row.info.name, row.page,
                           [_cell(row, c, env) for c, (_, env, _) in zip(cells, found)]))
    columns = []
    for j, (i, env, mixed) in enumerate(found):
        earned = Counter(r.cells[j].earned or "nothing" for r in rows
                         if r.cells[j].status is not None)
        counts = [(level, earned[level]) for level in (*LEVELS, "nothing") if earned[level]]
        columns.append(GpuColumn(report.directories[i], str(env[0]),
                                 cuda_versions({"driver": env[1], "cuda_runtime": env[2]}),
                                 mixed, counts, earned[VERIFIED]))
    return GpuMatrixPage(names.GPUS_PAGE, "capsules x GPUs", columns, rows, unaudited)
