"""Fills the report model from evidence directories (cpu, an H200, another GPU): every
registered capsule plus every capsule that has evidence, with one cell per directory, grouped by
op so one op's providers sit together."""
from __future__ import annotations

import shlex
from pathlib import Path

from conformance.peers.reproducer import PEERS as REPRODUCIBLE
from reports import commands, names, trust_view, verdicts
from reports.current import BuildView
from reports.glossary import FIXED_CLASS, STATUS_HINTS
from reports.model import (FAILING, FAILING_STATUSES, PASSING, UNAUDITED, CapsuleInfo,
                           CapsuleRow, CaseRef, Cell,
                           ClassCases, Contract, Counterexample, Counts, Determinism, Directory,
                           DirectionWorst, ErrorModelView, EvidenceView, FailureView,
                           HarnessError, OpGroup, PolicyView, Report, Sizes, StatsView, Unusable,
                           worst)
from reports.devices import build_devices
from reports.exhaustive import build_exhaustive
from reports.lowp import build_lowp
from reports.flags import build_flags
from reports.gpus import build_gpus
from reports.peers import build_peers
from reports.plugin_sources import PluginBuild
from reports.reader import DirectoryData
from reports.suites import build_suites

CONTRACT_ORDER = ("shape", "layout", "value", "vjp")
DIRECTIONS = ("forward", "vjp")


# --- a directory --------------------------------------------------------------------------------

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
    envs = [r["environment"] for r in recs]
    gpus = sorted({e["gpu"] for e in envs if e.get("gpu")})
    slug = names.slug(label.replace("/", "-"))
    while slug in used_slugs:
        slug += "-x"
    used_slugs.add(slug)
    devices = {r["capsule"]["device"] for r in recs}
    devices |= {s.get("device") for s in data.suites.values() if s.get("suite") != "allocator-cap"}
    trust = None if data.trust is None else trust_view.trust_export(data.trust,
                                                                     str(data.trust_file))
    return Directory(
        label=label, path=str(data.path), slug=slug,
        devices=sorted(d for d in devices if isinstance(d, str)),
        gpu=", ".join(gpus) or None,
        git_commits=sorted({e["git_commit"] for e in envs if e.get("git_commit")}),
        records=len(recs), trust=trust, unusable=list(data.unusable))


# --- one record -------------------------------------------------------------------------------

def capsule_info(rec: dict) -> CapsuleInfo:
    p = rec.get("numerical_policy") or {}
    contracts = rec.get("contracts") or {}
    order = [k for k in CONTRACT_ORDER if k in contracts] + sorted(
        k for k in contracts if k not in CONTRACT_ORDER)

    def contract(kind: str) -> Contract:
        c = contracts[kind] or {}
        bound = c.get("declared_bound") or {}
        return Contract(kind, str(c.get("claim") or ""), str(c.get("summary") or ""),
                        str(c.get("evidence") or ""), str(c.get("source_file") or ""),
                        c.get("native_symbol"), bound.get("ulps"), bound.get("reason"))
    return CapsuleInfo(
        name=str(rec.get("name", "")), op=str(rec.get("op", "")),
        provider=str(rec.get("provider", "")), device=str(rec.get("device", "")),
        trust_level=str(rec.get("trust_level", "")), supports_forward=rec.get("supports_forward"),
        vjp_mode=str(rec.get("vjp_mode", "")),
        policy=PolicyView(str(p.get("rounding", "")), str(p.get("subnormals", "")),
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


def _failure(f: dict) -> FailureView:
    return FailureView(str(f.get("output", "")), list(f.get("element") or []),
                       str(f.get("reason", "")), str(f.get("expected", "")), str(f.get("got", "")),
                       f.get("expected_value"), f.get("got_value"), f.get("exact"), f.get("error"),
                       f.get("bound"), f.get("ulps"),
                       failure_ratio(f.get("error"), f.get("bound")),
                       [(str(k), [str(x) for x in v]) for k, v in (f.get("inputs") or {}).items()])


def _case(c: dict | None) -> CaseRef | None:
    if not c:
        return None
    return CaseRef(str(c.get("class", "")), c.get("index", 0), c.get("seed", 0),
                   str(c.get("summary", "")), str(c.get("note") or ""))


def _counterexample(ce: dict, peer: bool = False) -> Counterexample:
    failures = [_failure(f) for f in ce.get("failures") or []]
    shrunk_failures = [_failure(f) for f in ce.get("shrunk_failures") or []]
    # schema_version 2 names the reasons a counterexample stands for; a version 1 record's are
    # those of its failures.
    reasons = list(ce.get("reasons") or dict.fromkeys(f.reason for f in failures
                                                      + shrunk_failures))
    replay = ce.get("replay_file")
    reproduce = f"torchlean-conformance reproduce {shlex.quote(str(replay))}" \
        if peer and isinstance(replay, str) and replay else None
    return Counterexample(_case(ce.get("case")), failures, _case(ce.get("shrunk")),
                          shrunk_failures, ce.get("replay_command"), replay, reasons,
                          reproduce)


def _stats(rec: dict) -> list[StatsView]:
    out = []
    for direction in DIRECTIONS:
        s = (rec.get("stats") or {}).get(direction)
        if not s:
            continue
        out.append(StatsView(direction, int(s.get("elements") or 0), s.get("worst_ratio"),
                             s.get("worst_ulps"), list((s.get("percentiles") or {}).items()),
                             [(str(k), int(v)) for k, v in (s.get("ulp_histogram") or {}).items()],
                             s.get("worst_ratio_failing")))
    return out


def _direction_of(f: FailureView) -> str:
    """Which side a failing element is on: VJP failure reasons start with `vjp-`."""
    return "vjp" if f.reason.startswith("vjp-") else "forward"


def _worst_by_direction(stats: list[StatsView], counterexamples: list[Counterexample],
                        stated: set[str],
                        failure_reasons: list[tuple[str, int]]) -> list[DirectionWorst]:
    """Forward and VJP apart, failing elements included: the record's worst_ratio_failing for
    the directions whose statistics state it (`stated`, schema_version 2), else the recorded
    counterexamples' (a lower bound: they hold some failing elements, not all). A NaN or inf
    mismatch has no finite ratio, and the record's ratios leave it out: the direction's worst is
    then "nan" (or "inf"), and the mismatch is named with its count."""
    by_side = {s.direction: s for s in stats}
    shown = [f for ce in counterexamples for f in ce.failures + ce.shrunk_failures]
    out = []
    for d in DIRECTIONS:
        s = by_side.get(d)
        ratios = [f.ratio for f in shown if _direction_of(f) == d]
        found = verdicts.mismatches(failure_reasons, d)
        if s is None and not ratios and not found:
            continue
        within = None if s is None else s.worst_ratio
        failing, source = (s.worst_ratio_failing, "record") if d in stated else (None, None)
        if failing is None and worst(ratios) is not None:
            failing, source = worst(ratios), "counterexamples"
        labels = [label for label, _ in found]
        mismatch = "nan" if "NaN mismatch" in labels else "inf" if labels else None
        out.append(DirectionWorst(d, within, failing, source if failing is not None else None,
                                  worst([within, failing, mismatch]), found))
    return out


def _by_class(cases: dict) -> list[ClassCases]:
    rows = [ClassCases(str(k), int(v.get("run") or 0), int(v.get("failed") or 0),
                       int(v.get("skipped") or 0), int(v.get("harness_errors") or 0),
                       k == FIXED_CLASS)
            for k, v in (cases.get("by_class") or {}).items()]
    return sorted(rows, key=lambda c: not c.fixed)      # the fixed edge set first; stable


def _sizes(cases: dict) -> Sizes | None:
    s = cases.get("sizes")
    if not s:
        return None
    return Sizes([(str(k), int(v)) for k, v in (s.get("buckets") or {}).items()],
                 s.get("max_elements"), s.get("max_terms"), s.get("elements_total"))


def _harness_errors(rec: dict) -> list[HarnessError]:
    return [HarnessError(str(h.get("class") or ""), h.get("index"), str(h.get("where") or ""),
                         str(h.get("error") or ""), str(h.get("traceback") or ""))
            for h in rec.get("harness_errors") or []]


def _vjp_status(rec: dict, info: CapsuleInfo) -> str:
    if info.vjp_mode == "none":
        return "n/a"
    if any(k.startswith("vjp-") for k in rec.get("failure_reasons") or {}):
        return "failed"
    if (rec.get("identity") or {}).get("failed"):
        return "failed"
    if rec.get("vjp_checked"):
        return "checked"
    return "not run" if rec.get("status") in ("unsupported", "interrupted") else "not checked"


def _short(v) -> str:
    """A float inside a sentence, 4 significant digits (the record keeps all of them)."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _determinism(rec: dict, suite: dict | None) -> Determinism:
    name = rec["capsule"]["name"]
    for c in (suite or {}).get("capsules") or []:
        if c.get("capsule") != name:
            continue
        d, t = c.get("default") or {}, c.get("deterministic") or {}
        detail = (f"default mode: {d.get('differing_runs')} of {d.get('runs')} runs differ "
                  f"(max spread {_short(d.get('max_spread'))}); deterministic mode: "
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


def evidence_from(rec: dict, directory: Directory, data: DirectoryData,
                  build: BuildView) -> EvidenceView:
    """One record (of a shape reports/shapes.py accepted) as the pages show it."""
    info = capsule_info(rec["capsule"])
    name = info.name
    cases = rec["cases"]
    stats = _stats(rec)
    fresh = trust_view.freshness(rec, build, data.trust, data.path)
    earned, earned_why, earned_note = trust_view.earned(rec, fresh, build, data.trust)
    earned_why = trust_view.as_declared(rec, earned, earned_why)
    fp = rec["fingerprint"]
    timing = rec["timing"]
    # a standalone reproducer only for the peers `reproduce` writes one for
    peer = str(rec["capsule"].get("name", "")).split(".", 1)[0] in REPRODUCIBLE
    counterexamples = [_counterexample(c, peer) for c in rec["counterexamples"]]
    stated = {d for d in DIRECTIONS if "worst_ratio_failing" in ((rec["stats"] or {}).get(d)
                                                                  or {})}
    failure_reasons = list(rec["failure_reasons"].items())
    by_direction = _worst_by_direction(stats, counterexamples, stated, failure_reasons)
    stats_worst = worst(d.within for d in by_direction)
    # a NaN or inf mismatch is a failing element too: the worst of them all
    failure_worst = worst([d.failing for d in by_direction]
                          + [d.worst for d in by_direction if d.mismatches])
    status = rec["status"]
    return EvidenceView(
        directory=directory, capsule=info, status=status, message=rec.get("message"),
        cases_total=cases["total"], cases_failed=cases["failed"], cases_skipped=cases["skipped"],
        by_class=_by_class(cases),
        skipped_notes=list(cases.get("skipped_notes") or []),
        error_models=[ErrorModelView(d, str(k), str(m.get("kind") or ""),
                                     str(m.get("label") or ""), str(m.get("source") or ""),
                                     str(m.get("reason") or ""), m.get("ulps"),
                                     m.get("signed_zero"), m.get("flush_allowed"), m.get("order"))
                      for d in DIRECTIONS for k, m in (rec["error_model"].get(d) or {}).items()],
        stats=stats, observed=list((rec.get("observed") or {}).items()),
        identity=list((rec.get("identity") or {}).items()),
        vjp_checked=bool(rec.get("vjp_checked")),
        failure_reasons=failure_reasons,
        counterexamples=counterexamples,
        settings=list(rec["settings"].items()),
        timing_seconds=timing.get("seconds"), cases_per_second=timing.get("cases_per_second"),
        environment=list(rec["environment"].items()),
        fingerprint_value=fp["value"], fingerprint_method=fp.get("method"),
        fingerprint_inputs=list(fp.get("inputs") or []),
        plugin=rec.get("plugin"), created=rec["created"],
        freshness=fresh, earned=earned, earned_why=earned_why,
        determinism=_determinism(rec, data.suites.get("determinism")),
        vjp_status=_vjp_status(rec, info), stats_worst=stats_worst, failure_worst=failure_worst,
        worst_ratio=worst([stats_worst, failure_worst]), worst_by_direction=by_direction,
        schema_version=rec["schema_version"], record_file=str(data.record_files.get(name, "")),
        earned_note=earned_note, status_hint=STATUS_HINTS.get(status),
        next_step=trust_view.next_step(rec, fresh, earned, data.trust, data.path),
        cases_harness_errors=int(cases.get("harness_errors") or 0), sizes=_sizes(cases),
        harness_errors=_harness_errors(rec),
        capsule_tests=trust_view.capsule_tests(data.trust, name),
        elements_per_second=timing.get("elements_per_second"),
        telling=verdicts.telling(counterexamples) if status in FAILING_STATUSES else None,
        reasons_explained=verdicts.explained(failure_reasons),
        rerun=commands.rerun(rec, data.path), differences=_differences(rec))


def _differences(rec: dict) -> list[tuple[str, str, int]]:
    """A peer record's clauses that explained elements (conformance/peers/classify.py)."""
    clauses = (rec.get("differences") or {}).get("clauses") or {}
    return [(str(name), str(c.get("class", "")), int(c.get("cases") or 0))
            for name, c in sorted(clauses.items()) if isinstance(c, dict)]


# --- the whole report ---------------------------------------------------------------------------

def _outcome(evs: list[EvidenceView]) -> str:
    if any(e.failing for e in evs):
        return FAILING
    if any(e.status == "passed" for e in evs):
        return PASSING
    return UNAUDITED


def _provider_key(row: CapsuleRow):
    # The reference provider first: it is the living definition the others are read against.
    return (row.info.provider != "reference", row.info.provider, row.info.device, row.info.name)


def build_report(evidence_dirs: list, build: BuildView, plugins: list[str] = ()) -> Report:
    """`plugins`: the plugins the user named to the report (`report --plugin`), whose capsules'
    fingerprints are recomputed in a kernel process (reports/plugin_sources.py); a plugin no one
    named is never run."""
    paths = [Path(d) for d in evidence_dirs]
    registered = {r["name"]: r for r in build.registered()}
    datas = [DirectoryData(p, registered) for p in paths]
    if plugins:
        wanted = {(rec["plugin"], rec["capsule"]["device"]) for data in datas
                  for rec in data.records.values() if rec.get("plugin")}
        build = PluginBuild(build, list(plugins), wanted)
    used: set[str] = set()
    dirs = [_directory(d, label, used) for d, label in zip(datas, _labels(paths))]
    evs: dict[str, list[EvidenceView | None]] = {}
    for i, (data, directory) in enumerate(zip(datas, dirs)):
        for name, rec in data.records.items():
            try:
                ev = evidence_from(rec, directory, data, build)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # reports/shapes.py should have turned the record away: a report defect, but
                # one record must not sink the report.
                u = Unusable(str(data.record_files[name]),
                             f"the report could not read it ({type(exc).__name__}: {exc})",
                             "a report defect: please report it with this file")
                directory.unusable.append(u)
                data.unusable_capsules.setdefault(name, u)
                continue
            evs.setdefault(name, [None] * len(dirs))[i] = ev
    rows = []
    for name in sorted(set(registered) | set(evs)):
        found = [e for e in evs.get(name, []) if e is not None]
        info = found[0].capsule if found else capsule_info(registered[name])
        # a plugin's capsule is run again with its plugin (the records say which)
        made_with = [datas[i].records[name] for i, e in enumerate(evs.get(name, [])) if e]
        plugin = next((commands.plugin_of(r) for r in made_with if commands.plugin_of(r)), None)
        contracts = next((commands.contracts_of(r) for r in made_with
                          if commands.contracts_of(r)), None)
        cells = []
        for i, (data, directory) in enumerate(zip(datas, dirs)):
            ev = evs.get(name, [None] * len(dirs))[i]
            bad = None if ev else data.unusable_capsules.get(name)
            applicable = ev is not None or bad is not None or info.device in directory.devices
            absent = None if ev or not applicable else \
                "unusable record" if bad else "no evidence"
            command = None if absent != "no evidence" else commands.run_command(
                name, info.device, data.path, plugin, contracts)
            cells.append(Cell(directory, ev, absent, applicable, bad, command))
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
    # The headline counts what the directories audited: a capsule without any record is listed
    # apart (a CPU directory can never audit the CUDA capsules, nor a plugin run the registry's).
    audited = [r for r in rows if r.audited]
    counts = Counts(len(audited), sum(r.outcome == PASSING for r in audited),
                    sum(r.outcome == FAILING for r in audited), sum(r.stale for r in audited),
                    sum(r.outcome == UNAUDITED for r in audited),
                    sum(any(e.freshness.state == "unknown" for e in r.evidence) for r in audited),
                    sum(bool(r.shown_cells) and not r.audited for r in rows),
                    sum(not r.shown_cells for r in rows))
    report = Report(dirs, op_groups, counts,
                    build_suites(datas, dirs, {r.info.name for r in rows}))
    report.peers = build_peers(report)
    report.exhaustive = build_exhaustive(report)
    report.lowp = build_lowp(report)
    report.devices = build_devices(report)
    report.flags = build_flags(report)
    report.gpus = build_gpus(report)
    return report
