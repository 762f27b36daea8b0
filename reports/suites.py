"""Suite pages (guards, allocator-cap, determinism) from the suite records an evidence directory
holds as suite-<name>.json; each suite gets one page with a section per directory."""
from __future__ import annotations

from collections import Counter

from reports import names
from reports.model import Directory, SuitePage, SuiteRow, SuiteSection

WHAT = {
    "guards": ("Bad inputs for every check a wrapper makes before and after a kernel call. Each "
               "must raise the named error with a message naming the values, launch no kernel, "
               "and leave the session working."),
    "allocator-cap": ("TORCHLEAN_CUDA_CACHE_CAP_BYTES, each configuration in a fresh process (the "
                      "cap is read once): accepted and rejected values, the cache held under the "
                      "cap, and a churn of many allocations that must not leak."),
    "determinism": ("Repeat runs of every capsule whose reduction order is not fixed or that "
                    "accumulates: bitwise repeatability in the default and the deterministic "
                    "mode, and the deterministic result within its error bound."),
}
TITLES = {"guards": "Guard suite", "allocator-cap": "Allocator-cap suite",
          "determinism": "Determinism suite"}


def _failures_first(rows: list[SuiteRow]) -> list[SuiteRow]:
    return sorted(rows, key=lambda r: r.passed)      # stable: record order within each group


def _guards(rec: dict, d: Directory, known: set[str]) -> SuiteSection:
    outs = rec.get("outcomes") or []
    by_check = Counter(o.get("check", "") for o in outs)
    held = Counter(o.get("check", "") for o in outs if o.get("passed"))
    rows = [SuiteRow(bool(o.get("passed")),
                     [o.get("name"), o.get("check"), o.get("raised"), o.get("message"),
                      o.get("launches"), o.get("problem") or ""]) for o in outs]
    return SuiteSection(
        d, bool(rec.get("passed")),
        [("device", rec.get("device")), ("bad inputs tried", rec.get("tried")),
         ("rejected as required", rec.get("rejected")),
         ("a known op still runs afterwards", rec.get("known_op_ok"))],
        "by wrapper check", [(k, by_check[k], held[k]) for k in sorted(by_check)],
        ["case", "check", "raised", "message", "kernel launches", "problem"],
        _failures_first(rows))


def _stat(obs: dict, key: str):
    """A probe reports stats after release; a churn run at its end."""
    for phase in ("released", "end"):
        if phase in obs:
            return (obs[phase] or {}).get(key)
    return None


def _allocator(rec: dict, d: Directory, known: set[str]) -> SuiteSection:
    rows = []
    for o in rec.get("outcomes") or []:
        obs = o.get("observed") or {}
        value = "(unset)" if o.get("value") is None else repr(o.get("value"))
        rows.append(SuiteRow(bool(o.get("passed")), [
            o.get("name"), value, _stat(obs, "cache_cap_bytes"), _stat(obs, "cache_bytes"),
            _stat(obs, "live_bytes"), "; ".join(obs.get("warnings") or []),
            "; ".join(o.get("problems") or [])]))
    return SuiteSection(
        d, bool(rec.get("passed")),
        [("backend", rec.get("backend")), ("configurations", rec.get("configurations")),
         ("held", rec.get("held"))],
        "", [],
        ["configuration", "value", "cap read (bytes)", "cache after (bytes)",
         "live after (bytes)", "warnings", "problems"],
        _failures_first(rows))


def _mode(m: dict) -> str:
    if not m:
        return ""
    bits = "bitwise" if m.get("bitwise_identical") else "differs"
    return (f"{bits}: {m.get('differing_runs')} of {m.get('runs')} runs differ, "
            f"max spread {m.get('max_spread')}")


def _determinism(rec: dict, d: Directory, known: set[str]) -> SuiteSection:
    rows = []
    for c in rec.get("capsules") or []:
        name = str(c.get("capsule", ""))
        rows.append(SuiteRow(bool(c.get("passed")), [
            name, c.get("op"), _mode(c.get("default") or {}),
            _mode(c.get("deterministic") or {}), c.get("within_bound"), c.get("worst_ratio"),
            "; ".join(c.get("problems") or [])],
            link=names.capsule_page(name) if name in known else None))
    return SuiteSection(
        d, bool(rec.get("passed")),
        [("device", rec.get("device")), ("capsules audited", len(rows)),
         ("passed", sum(r.passed for r in rows))],
        "", [],
        ["capsule", "op", "default mode", "deterministic mode", "within bound",
         "worst error/bound", "problems"],
        _failures_first(rows))


SECTION = {"guards": _guards, "allocator-cap": _allocator, "determinism": _determinism}


def build_suites(datas: list, dirs: list[Directory], known: set[str]) -> list[SuitePage]:
    """`known`: the capsules that have a page, so suite rows link only to pages that exist."""
    pages = []
    for suite, page in names.SUITE_PAGES.items():
        sections = [SECTION[suite](data.suites[suite], d, known)
                    for data, d in zip(datas, dirs) if suite in data.suites]
        if sections:
            pages.append(SuitePage(suite, TITLES[suite], page, WHAT[suite], sections))
    return pages
