"""Fills the report model from evidence directories. Each directory is one column group (cpu, an
H200, another GPU); rows are every registered capsule plus every capsule that has evidence,
grouped by op so one op's providers sit side by side."""
from __future__ import annotations

import json
from pathlib import Path

from reports import names
from reports.current import BuildView
from reports.model import (FAILING, PASSING, UNAUDITED, CapsuleInfo, CapsuleRow, CaseRef, Cell,
                           ClassCases, Contract, Counterexample, Counts, Determinism, Directory,
                           ErrorModel, Evidence, Failure, Freshness, OpGroup, Policy, Report,
                           Stats)
from reports.suites import build_suites

# The record and export formats (conformance.evidence.SCHEMA, conformance.trust.TRUST_FORMAT),
# spelled out so that reading evidence never imports the engine.
EVIDENCE_SCHEMA = "torchlean-conformance-evidence"
TRUST_FORMAT = "torchlean-conformance-trust"
CONTRACT_ORDER = ("shape", "layout", "value", "vjp")


# --- reading a directory ------------------------------------------------------------------------

class DirectoryData:
    """The raw records of one directory: capsule evidence, suite records, the trust export."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[str, dict] = {}
        self.suites: dict[str, dict] = {}
        self.trust: dict | None = None
        self.unreadable: list[str] = []
        for p in sorted(path.glob("*.json")):
            try:
                doc = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                self.unreadable.append(f"{p.name}: {exc}")
                continue
            self._take(p.name, doc)

    def _take(self, file: str, doc) -> None:
        if not isinstance(doc, dict):
            self.unreadable.append(f"{file}: not a JSON object")
        elif doc.get("format") == TRUST_FORMAT:
            self.trust = doc
        elif doc.get("suite") in names.SUITE_PAGES:
            self.suites[doc["suite"]] = doc
        elif doc.get("schema") == EVIDENCE_SCHEMA:
            name = (doc.get("capsule") or {}).get("name")
            if not isinstance(name, str):
                self.unreadable.append(f"{file}: evidence record without a capsule name")
            elif name in self.records:
                self.unreadable.append(f"{file}: a second record for `{name}`, ignored")
            else:
                self.records[name] = doc
        else:
            self.unreadable.append(f"{file}: neither an evidence record, a suite record nor a "
                                   "trust export")


def _labels(paths: list[Path]) -> list[str]:
    """Directory names, lengthened with their parents until they differ."""
    depth = 1
    while True:
        labels = ["/".join(p.resolve().parts[-depth:]) for p in paths]
        if len(set(labels)) == len(labels) or depth > 8:
            return labels
        depth += 1


def _directory(data: DirectoryData, label: str, used_slugs: set[str]) -> Directory:
    recs = list(data.records.values())
    envs = [r.get("environment") or {} for r in recs]
    gpus = sorted({e["gpu"] for e in envs if e.get("gpu")})
    slug = names.slug(label.replace("/", "-"))
    while slug in used_slugs:
        slug += "-x"
    used_slugs.add(slug)
    devices = {(r.get("capsule") or {}).get("device") for r in recs}
    devices |= {s.get("device") for s in data.suites.values() if s.get("suite") != "allocator-cap"}
    return Directory(
        label=label, path=str(data.path), slug=slug,
        devices=sorted(d for d in devices if isinstance(d, str)),
        gpu=", ".join(gpus) or None,
        git_commits=sorted({e["git_commit"] for e in envs if e.get("git_commit")}),
        records=len(recs),
        trust_file=None if data.trust is None else str(data.trust.get("generated", "")),
        unreadable=list(data.unreadable))


# --- one record -------------------------------------------------------------------------------

def capsule_info(rec: dict) -> CapsuleInfo:
    p = rec.get("numerical_policy") or {}
    contracts = rec.get("contracts") or {}
    order = [k for k in CONTRACT_ORDER if k in contracts] + sorted(
        k for k in contracts if k not in CONTRACT_ORDER)

    def contract(kind: str) -> Contract:
        c = contracts[kind] or {}
        bound = c.get("declared_bound") or {}
        return Contract(kind, str(c.get("claim", "")), str(c.get("summary", "")),
                        str(c.get("evidence", "")), str(c.get("source_file", "")),
                        c.get("native_symbol"), bound.get("ulps"), bound.get("reason"))
    return CapsuleInfo(
        name=str(rec.get("name", "")), op=str(rec.get("op", "")),
        provider=str(rec.get("provider", "")), device=str(rec.get("device", "")),
        trust_level=str(rec.get("trust_level", "")), supports_forward=rec.get("supports_forward"),
        vjp_mode=str(rec.get("vjp_mode", "")),
        policy=Policy(str(p.get("rounding", "")), str(p.get("subnormals", "")),
                      str(p.get("contraction", "")), str(p.get("reduction", "")),
                      str(p.get("label", ""))),
        contracts=[contract(k) for k in order], notes=str(rec.get("notes") or ""))


def failure_ratio(error, bound):
    """error / bound of one failing element, keeping the record's "nan"/"inf" strings."""
    if error in ("nan", "inf", "-inf"):
        return "nan" if error == "nan" else "inf"
    if not isinstance(error, (int, float)) or not isinstance(bound, (int, float)):
        return None
    if bound <= 0:
        return 0.0 if error == 0 else "inf"
    return abs(error) / bound


def _failure(f: dict) -> Failure:
    return Failure(str(f.get("output", "")), list(f.get("element") or []),
                   str(f.get("reason", "")), str(f.get("expected", "")), str(f.get("got", "")),
                   f.get("expected_value"), f.get("got_value"), f.get("exact"), f.get("error"),
                   f.get("bound"), f.get("ulps"), failure_ratio(f.get("error"), f.get("bound")),
                   [(str(k), [str(x) for x in v]) for k, v in (f.get("inputs") or {}).items()])


def _case(c: dict | None) -> CaseRef | None:
    if not c:
        return None
    return CaseRef(str(c.get("class", "")), c.get("index", 0), c.get("seed", 0),
                   str(c.get("summary", "")), str(c.get("note") or ""))


def _counterexample(ce: dict) -> Counterexample:
    return Counterexample(_case(ce.get("case")), [_failure(f) for f in ce.get("failures") or []],
                          _case(ce.get("shrunk")),
                          [_failure(f) for f in ce.get("shrunk_failures") or []],
                          ce.get("replay_command"), ce.get("replay_file"))


def _stats(rec: dict) -> list[Stats]:
    out = []
    for direction in ("forward", "vjp"):
        s = (rec.get("stats") or {}).get(direction)
        if not s:
            continue
        out.append(Stats(direction, int(s.get("elements") or 0), s.get("worst_ratio"),
                         s.get("worst_ulps"), list((s.get("percentiles") or {}).items()),
                         [(str(k), int(v)) for k, v in (s.get("ulp_histogram") or {}).items()]))
    return out


def worst(values) -> object:
    """The worst of several error/bound ratios: "nan" over "inf" over the largest number."""
    vals = [v for v in values if v is not None]
    for text in ("nan", "inf"):
        if text in vals:
            return text
    nums = [v for v in vals if isinstance(v, (int, float))]
    return max(nums) if nums else None


def _vjp_status(rec: dict, info: CapsuleInfo) -> str:
    if info.vjp_mode == "none":
        return "n/a"
    if any(k.startswith("vjp-") for k in rec.get("failure_reasons") or {}):
        return "failed"
    if (rec.get("identity") or {}).get("failed"):
        return "failed"
    if rec.get("vjp_checked"):
        return "checked"
    return "not run" if rec.get("status") == "unsupported" else "not checked"


def _determinism(rec: dict, suite: dict | None) -> Determinism:
    name = rec["capsule"]["name"]
    for c in (suite or {}).get("capsules") or []:
        if c.get("capsule") != name:
            continue
        d, t = c.get("default") or {}, c.get("deterministic") or {}
        detail = (f"default mode: {d.get('differing_runs')} of {d.get('runs')} runs differ "
                  f"(max spread {d.get('max_spread')}); deterministic mode: "
                  f"{t.get('differing_runs')} of {t.get('runs')} runs differ")
        if d.get("bitwise_identical") and t.get("bitwise_identical"):
            label = f"bitwise ({d.get('runs')} runs)"
        elif t.get("bitwise_identical"):
            label = "deterministic mode only"
        else:
            label = f"differs ({t.get('differing_runs')} of {t.get('runs')} runs)"
        return Determinism(label, bool(c.get("passed")), "determinism suite", detail)
    obs = rec.get("observed") or {}
    rep = obs.get("bitwise_repeatable")
    if rep is None:
        return Determinism("not observed", None, "campaign repeat runs", "no repeat runs recorded")
    runs, differ = obs.get("repeat_runs"), obs.get("repeat_differ")
    detail = f"{differ} of {runs} cases gave other bits when run again"
    label = f"repeatable ({runs} cases)" if rep else f"differs ({differ} of {runs} cases)"
    return Determinism(label, bool(rep), "campaign repeat runs", detail)


def _freshness(rec: dict, build: BuildView, trust: dict | None) -> Freshness:
    name = rec["capsule"]["name"]
    recorded = (rec.get("fingerprint") or {}).get("value")
    current, why = build.fingerprint(name, rec.get("environment") or {})
    if current is not None:
        state = "fresh" if recorded == current else "stale"
        return Freshness(state, recorded, current, why,
                         "same build fingerprint" if state == "fresh" else
                         "the evidence was made for another build fingerprint")
    entry = ((trust or {}).get("capsules") or {}).get(name) or {}
    if entry.get("fingerprint"):
        state = "fresh" if recorded == entry["fingerprint"] else "stale"
        return Freshness(state, recorded, entry["fingerprint"],
                         f"trust.json exported {trust.get('generated', '?')}",
                         f"compared with the directory's trust export, because {why}")
    return Freshness("unknown", recorded, None, "none", why)


def _earned(rec: dict, fresh: Freshness, build: BuildView, trust: dict | None):
    name = rec["capsule"]["name"]
    entry = ((trust or {}).get("capsules") or {}).get(name)
    if entry and entry.get("fingerprint") == fresh.recorded:
        return entry.get("earned"), (f"{entry.get('reason', '')} (trust.json exported "
                                     f"{trust.get('generated', '?')})")
    if fresh.state == "stale":
        return None, "stale evidence earns nothing"
    if fresh.state == "fresh":
        return build.earned(rec)
    return None, f"unknown here: no trust.json entry for this fingerprint, and {fresh.why}"


def evidence_from(rec: dict, directory: Directory, data: DirectoryData,
                  build: BuildView) -> Evidence:
    info = capsule_info(rec.get("capsule") or {})
    cases = rec.get("cases") or {}
    stats = _stats(rec)
    fresh = _freshness(rec, build, data.trust)
    earned, earned_why = _earned(rec, fresh, build, data.trust)
    fp = rec.get("fingerprint") or {}
    timing = rec.get("timing") or {}
    counterexamples = [_counterexample(c) for c in rec.get("counterexamples") or []]
    stats_worst = worst(s.worst_ratio for s in stats)
    failure_worst = worst(f.ratio for ce in counterexamples
                          for f in ce.failures + ce.shrunk_failures)
    return Evidence(
        directory=directory, capsule=info, status=str(rec.get("status", "")),
        message=rec.get("message"),
        cases_total=int(cases.get("total") or 0), cases_failed=int(cases.get("failed") or 0),
        cases_skipped=int(cases.get("skipped") or 0),
        by_class=[ClassCases(str(k), int(v.get("run") or 0), int(v.get("failed") or 0),
                             int(v.get("skipped") or 0))
                  for k, v in (cases.get("by_class") or {}).items()],
        skipped_notes=[str(n) for n in cases.get("skipped_notes") or []],
        error_models=[ErrorModel(d, str(k), str(m.get("kind", "")), str(m.get("label", "")),
                                 str(m.get("source", "")), str(m.get("reason", "")),
                                 m.get("ulps"), m.get("signed_zero"), m.get("flush_allowed"),
                                 m.get("order"))
                      for d in ("forward", "vjp")
                      for k, m in ((rec.get("error_model") or {}).get(d) or {}).items()],
        stats=stats, observed=list((rec.get("observed") or {}).items()),
        identity=list((rec.get("identity") or {}).items()),
        vjp_checked=bool(rec.get("vjp_checked")),
        failure_reasons=list((rec.get("failure_reasons") or {}).items()),
        counterexamples=counterexamples,
        settings=list((rec.get("settings") or {}).items()),
        timing_seconds=timing.get("seconds"), cases_per_second=timing.get("cases_per_second"),
        environment=list((rec.get("environment") or {}).items()),
        fingerprint_value=fp.get("value"), fingerprint_method=fp.get("method"),
        fingerprint_inputs=[str(i) for i in fp.get("inputs") or []],
        plugin=rec.get("plugin"), created=rec.get("created"),
        freshness=fresh, earned=earned, earned_why=earned_why,
        determinism=_determinism(rec, data.suites.get("determinism")),
        vjp_status=_vjp_status(rec, info), stats_worst=stats_worst, failure_worst=failure_worst,
        worst_ratio=worst([stats_worst, failure_worst]))


# --- the whole report ---------------------------------------------------------------------------

def _outcome(evs: list[Evidence]) -> str:
    if any(e.failing for e in evs):
        return FAILING
    if any(e.status == "passed" for e in evs):
        return PASSING
    return UNAUDITED


def _provider_key(row: CapsuleRow):
    # The reference provider first: it is the living definition the others are read against.
    return (row.info.provider != "reference", row.info.provider, row.info.device, row.info.name)


def build_report(evidence_dirs: list, build: BuildView) -> Report:
    paths = [Path(d) for d in evidence_dirs]
    datas = [DirectoryData(p) for p in paths]
    used: set[str] = set()
    dirs = [_directory(d, label, used) for d, label in zip(datas, _labels(paths))]
    registered = {r["name"]: r for r in build.registered()}
    evs: dict[str, list[Evidence | None]] = {}
    for i, (data, directory) in enumerate(zip(datas, dirs)):
        for name, rec in data.records.items():
            try:
                ev = evidence_from(rec, directory, data, build)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # One malformed record is reported on the index, not allowed to sink the report.
                directory.unreadable.append(f"the record of `{name}` does not follow the "
                                            f"evidence schema ({type(exc).__name__}: {exc})")
                continue
            evs.setdefault(name, [None] * len(dirs))[i] = ev
    rows = []
    for name in sorted(set(registered) | set(evs)):
        found = [e for e in evs.get(name, []) if e is not None]
        info = found[0].capsule if found else capsule_info(registered[name])
        cells = []
        for i, directory in enumerate(dirs):
            ev = evs.get(name, [None] * len(dirs))[i]
            applicable = ev is not None or info.device in directory.devices
            cells.append(Cell(directory, ev, None if ev or not applicable else "no evidence",
                              applicable))
        differs = [e.directory.label for e in found if e.capsule != info]
        if name in registered and capsule_info(registered[name]) != info:
            differs.append("this checkout's registry")
        rows.append(CapsuleRow(info, names.capsule_page(name), names.capsule_anchor(name),
                               name in registered, cells, _outcome(found),
                               any(e.freshness.state == "stale" for e in found), differs))
    groups: dict[str, list[CapsuleRow]] = {}
    for row in rows:
        groups.setdefault(row.info.op, []).append(row)
    op_groups = [OpGroup(op, names.op_anchor(op), sorted(rs, key=_provider_key))
                 for op, rs in sorted(groups.items())]
    counts = Counts(len(rows), sum(r.outcome == PASSING for r in rows),
                    sum(r.outcome == FAILING for r in rows), sum(r.stale for r in rows),
                    sum(r.outcome == UNAUDITED for r in rows))
    return Report(dirs, op_groups, counts,
                  build_suites(datas, dirs, {r.info.name for r in rows}))
