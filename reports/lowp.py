"""The page "16-bit kernels": the records of `torchlean-conformance lowp` (files lowp-<kernel>.json)
in every evidence directory: per kernel its format, op, declared bound and accumulation, what was
judged (all 2^16 inputs, the 2^32 pairs of a binary op or a sample of them, with its VJP's
passes, against the plugin's contract for an op of its own, or the cases of a run seed, and its
VJP's), the verdict, the failure reasons and the first counterexample of each, and apart from the
failures the differences: results a peer's contract explained as its own conventions
(conformance/lowp/conventions.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.lowp.trust import own_reference, read_lowp, read_trust
from reports import names


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
    earned: str | None = None           # from the directory's trust-lowp.json
    earned_reason: str | None = None    # None: no trust export names this kernel
    peer: str | None = None             # the peer whose contract judged it, if one did
    # (clause, its class: convention or undocumented, elements explained), not failures
    differences: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class LowpSection:
    directory: object
    kernels: list[LowpView]
    unusable: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)   # the --plugin specs the records name
    exported: bool = False                               # a trust-lowp.json was read


@dataclass
class LowpPage:
    page: str
    title: str
    sections: list[LowpSection]


def _example(c: dict) -> str:
    where = (f"input {c.get('input')} ({c.get('input_value')})" if "input" in c else
             f"{c.get('class')}[{c.get('index')}], shapes {c.get('shapes')}, " +
             (f"gradient {c.get('gradient')} " if "gradient" in c else "") +
             f"element {c.get('element')}")
    return (f"{where}: expected {c.get('expected')}, got {c.get('got')} ({c.get('got_value')}): "
            f"{c.get('reason')}")


def _earned(view: LowpView, rec: dict, trust: dict | None) -> None:
    """The trust export's word on the record, when it was made from this very record."""
    entry = ((trust or {}).get("kernels") or {}).get(view.kernel)
    if not isinstance(entry, dict) or not isinstance(entry.get("reason"), str):
        return
    if entry.get("record_created") != rec.get("created"):
        view.earned, view.earned_reason = None, ("the trust export predates this record: rerun "
                                                 "`torchlean-conformance export-trust --lowp DIR`")
    else:
        view.earned, view.earned_reason = entry.get("earned"), entry["reason"]


def _differences(view: LowpView, rec: dict) -> None:
    diff = rec.get("differences")
    if not isinstance(diff, dict) or not isinstance(diff.get("clauses"), dict):
        return
    view.peer = diff.get("peer") if isinstance(diff.get("peer"), str) else "its peer"
    view.differences = [(str(name), str(c.get("class")), c["elements"])
                        for name, c in sorted(diff["clauses"].items())
                        if isinstance(c, dict) and isinstance(c.get("elements"), int)]


def _against(rec: dict) -> str:
    """An own op's reference, in words: the plugin's contract, not ours."""
    ref = own_reference(rec)
    if ref is None:
        return ""
    cert = ref.get("certification") or {}
    return (f", against the reference of the contract {ref.get('contract')} (the plugin's, "
            f"certified on {cert.get('pairs')} pairs)")


def _vjp_passes(vjp) -> str:
    """A binary VJP's passes, in words: each one's evaluations and whether it was complete."""
    if not isinstance(vjp, dict) or not isinstance(vjp.get("passes"), list):
        return ""
    return "; VJP: " + ", ".join(
        f"{p.get('name')} {p.get('evaluations')}" +
        (" (all)" if p.get("complete") else " (a sample)")
        for p in vjp["passes"] if isinstance(p, dict))


def _view(rec: dict) -> LowpView:
    cases, run = rec.get("cases"), rec.get("run") or {}
    if isinstance(cases, dict):
        judged = (f"{cases.get('total')} cases ({rec.get('elements')} elements) of run seed "
                  f"{run.get('seed')} ({run.get('seed_source')})")
        vjp = rec.get("vjp")
        if isinstance(vjp, dict):
            judged += (f", and its VJP's {(vjp.get('cases') or {}).get('total')} cases "
                       f"({vjp.get('elements')} elements)")
    elif isinstance(rec.get("pairs"), int):
        judged = (f"all {rec['pairs']} input pairs" if rec.get("exhaustive") else
                  f"{rec['pairs']} of the 2^32 input pairs (a sample)") + \
            (f", judged on {rec['judged_on']}" if isinstance(rec.get("judged_on"), str) else "")
        judged += _against(rec) + _vjp_passes(rec.get("vjp"))
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


def build_lowp(report) -> LowpPage | None:
    """The page, or None when no directory holds a 16-bit kernel's record."""
    sections = []
    for directory in report.directories:
        recs, bad = read_lowp(Path(directory.path))
        if recs or bad:
            trust = read_trust(Path(directory.path))
            pairs = [(_view(r), r) for r in recs]
            for v, r in pairs:
                _earned(v, r, trust)
                _differences(v, r)
            views = sorted((v for v, _ in pairs), key=lambda v: (v.storage, v.op, v.kernel))
            plugins = sorted({v.plugin for v in views if v.plugin})
            sections.append(LowpSection(directory, views, bad, plugins, trust is not None))
    return LowpPage(names.LOWP_PAGE, "16-bit kernels", sections) if sections else None
