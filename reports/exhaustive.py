"""The page "verified by exhaustion": the exhaustive sweep records of every evidence directory
(`torchlean-conformance exhaustive`, files exhaustive-<capsule>.json): per capsule the verdict and
where it ran, the largest ulp error forward and VJP and its input, the ulp histogram, what went
to mpmath, and the special-value and subnormal counts; then, per function, the measured maxima
beside the bounds NVIDIA documents for its float32 functions (CUDA C++ Programming Guide,
single-precision mathematical functions), for our capsules and for the ones audited through
`--plugin` (fixtures/plugins/cupy_ufuncs.py: CuPy's own ufuncs).

A sampled sweep (--stride, or --device cpu) is shown as such and never as verified; whether a
capsule earned `verified` is the trust export's word (conformance/trust.py), shown on the index.
A directory's ulp table (`torchlean-conformance ulp-table`: ulp-table.json, reports/ulp_table.py)
heads its section."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.evidence import cuda_versions
from conformance.formats import EXHAUSTIVE_FORMAT
from conformance.jsonfile import read_documents
from conformance.ulp_table import FUNCTIONS
from reports import names
from reports.ulp_table import UlpTableView, read_table

# NVIDIA's documented maximum ulp error of the float32 function behind each op (CUDA C++
# Programming Guide, "Single-Precision Floating-Point Functions", default flags; sqrtf is IEEE
# correctly rounded without -prec-sqrt=false). From tests, not guaranteed, NVIDIA says. Written
# once, in the ulp table's rows (conformance/ulp_table/__init__.py), by the capsule op's label.
NVIDIA_ULPS = {f.label: (f.cuda_function, f.cuda_ulps) for f in FUNCTIONS
               if f.cuda_function is not None}


@dataclass
class SideView:
    elements: int
    failed: int
    max_ulps: float
    max_input: str | None
    histogram: list[tuple[str, int]]
    to_mpmath: int
    not_correctly_rounded: int
    mismatches: str          # NaN / inf / signed-zero mismatches, in words
    subnormals: str          # inputs, results preserved / flushed, inputs read as zero
    reasons: list[tuple[str, int]]
    model: str


@dataclass
class SweepView:
    capsule: str
    op: str
    page: str | None         # the capsule's page when the report has one
    mode: str
    stride: int
    status: str
    verdict: str             # the sentence shown: verified by exhaustion on ..., or why not
    patterns: int
    seconds: float
    forward: SideView
    vjp: SideView | None
    problems: list[str] = field(default_factory=list)


@dataclass
class NvidiaRow:
    op: str
    function: str
    documented: int
    measured: list[tuple[str, str, float, str]]    # (capsule, mode, max ulps, status)


@dataclass
class ExhaustiveSection:
    directory: object        # reports.model.Directory
    sweeps: list[SweepView]
    nvidia: list[NvidiaRow]
    unusable: list[str]
    ulp_table: UlpTableView | None = None


@dataclass
class ExhaustivePage:
    page: str
    title: str
    sections: list[ExhaustiveSection]


def _side(side: dict | None, ref: dict | None) -> SideView | None:
    if side is None:
        return None
    ref = ref or {}
    model = ref.get("model") or {}
    return SideView(
        int(side.get("elements", 0)), int(side.get("failed", 0)),
        float(side.get("max_ulps", 0.0)), side.get("max_ulps_input"),
        [(k, int(v)) for k, v in (side.get("ulp_histogram") or {}).items()],
        int(ref.get("to_mpmath", 0)), int(side.get("not_correctly_rounded", 0)),
        f"NaN {side.get('nan_mismatch', 0)}, inf {side.get('inf_mismatch', 0)}, signed zero "
        f"{side.get('signed_zero_mismatch', 0)}",
        f"{side.get('subnormal_inputs', 0)} inputs ({side.get('subnormal_inputs_failed', 0)} "
        f"failed, {side.get('inputs_flushed', 0)} read as zero); {side.get('subnormal_results', 0)}"
        f" results ({side.get('subnormals_preserved', 0)} preserved, "
        f"{side.get('subnormals_flushed', 0)} flushed)",
        sorted((side.get("reasons") or {}).items()), str(model.get("label", "")))


def verdict_line(rec: dict) -> str:
    env = rec.get("environment") or {}
    where = (f"{env.get('gpu')}, {cuda_versions(env)}"
             if rec.get("device") == "cuda" else "the CPU (NumPy)")
    if rec.get("mode") != "exhaustive" or rec.get("device") != "cuda":
        return (f"sampled sweep (every {rec.get('stride')}-th bit pattern) on {where}, "
                f"{rec.get('status')}: a sample, never verified")
    if rec.get("status") == "passed":
        return f"verified by exhaustion on {where}"
    return f"exhaustive sweep on {where}: {rec.get('status')} ({rec.get('message') or ''})"


def _sweep(rec: dict, pages: dict[str, str]) -> SweepView:
    cap = rec.get("capsule") or {}
    name = str(cap.get("name", "?"))
    refs = rec.get("reference") or {}
    problems = [p for s in ("forward", "vjp") for p in ((refs.get(s) or {}).get("problems") or [])]
    return SweepView(name, str(cap.get("op", "?")), pages.get(name), str(rec.get("mode")),
                     int(rec.get("stride", 0) or 0), str(rec.get("status")), verdict_line(rec),
                     int((rec.get("patterns") or {}).get("checked", 0)),
                     float(rec.get("seconds", 0.0)), _side(rec.get("forward"), refs.get("forward")),
                     _side(rec.get("vjp"), refs.get("vjp")), problems)


def read_sweeps(directory: Path) -> tuple[list[dict], list[str]]:
    """The sweep records of a directory, and a line for each file that is not one."""
    return read_documents(directory, "exhaustive-*.json", EXHAUSTIVE_FORMAT,
                       lambda doc: isinstance(doc.get("forward"), dict),
                       "an exhaustive sweep record", "torchlean-conformance exhaustive")


def _nvidia(sweeps: list[SweepView]) -> list[NvidiaRow]:
    rows = []
    for op, (fn, ulps) in NVIDIA_ULPS.items():
        measured = [(s.capsule, s.mode, s.forward.max_ulps, s.status) for s in sweeps
                    if s.op == op]
        if measured:
            rows.append(NvidiaRow(op, fn, ulps, measured))
    return rows


def build_exhaustive(report) -> ExhaustivePage | None:
    """The page, or None when no directory holds a sweep record."""
    pages = {r.info.name: r.page for r in report.rows}
    sections = []
    for directory in report.directories:
        recs, bad = read_sweeps(Path(directory.path))
        table, table_bad = read_table(Path(directory.path))
        if not recs and not bad and table is None and table_bad is None:
            continue
        sweeps = sorted((_sweep(r, pages) for r in recs), key=lambda s: (s.op, s.capsule))
        sections.append(ExhaustiveSection(directory, sweeps, _nvidia(sweeps),
                                          bad + ([table_bad] if table_bad else []), table))
    if not sections:
        return None
    return ExhaustivePage(names.EXHAUSTIVE_PAGE, "verified by exhaustion", sections)
