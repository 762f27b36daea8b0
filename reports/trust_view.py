"""Freshness and earned trust of one record, and the directory's trust export as the index shows
it. Earned trust comes from trust.json (conformance/trust.py) when the export was made for the
build the record is judged against; otherwise it is computed here, without test evidence."""
from __future__ import annotations

from pathlib import Path

from reports import commands, plugin_sources
from reports.current import BuildView
from reports.glossary import STATUS_HINTS
from reports.model import Freshness, TestCounts, TrustExport

EXPORT_HINT = ("`torchlean-conformance export-trust --tests junit.xml` writes trust.json with "
               "test evidence")


def trust_export(doc: dict, file: str) -> TrustExport:
    """The index's view of a trust export of version 1 or 2 (reports/shapes.py checked it)."""
    if doc["version"] == 1:
        note = doc.get("test_suite") or "none recorded"
        return TrustExport(file, 1, doc["device"], doc.get("generated"), None, None, None,
                           note if note.startswith("test suite") else f"test suite: {note}",
                           None, "guards: not recorded (a version 1 export)", None)
    checkout = doc.get("checkout") or {}
    suite, guards = doc.get("test_suite"), doc.get("guards")
    if suite is None:
        suite_line, suite_ok = "test suite: none given (exported without --tests)", False
    else:
        counts = ", ".join(f"{suite.get(k) if suite.get(k) is not None else '?'} {k}"
                           for k in ("passed", "failed", "skipped"))
        suite_ok = suite.get("ok")
        # The note repeats the counts when all is well; it says what is wrong when not.
        suite_line = f"test suite: {counts}" + (f" ({suite['file']})" if suite.get("file") else
                                                "") + \
            (f": {suite['note']}" if suite_ok is not True and suite.get("note") else "")
    if guards is None:
        guards_line, guards_ok = "guards: not recorded", None
    else:
        status = guards.get("status") or "unknown"
        guards_line = f"guards: {status}" + (f" ({guards['note']})" if guards.get("note")
                                             else "")
        guards_ok = {"passed": True, "failed": False}.get(status)
    tree = f"tree {checkout['tree']}" if checkout.get("tree") else \
        f"checkout digest {checkout['digest'][:12]}" if checkout.get("digest") else None
    return TrustExport(file, 2, doc["device"], doc.get("generated"), checkout.get("commit"),
                       tree, (doc.get("environment") or {}).get("gpu"),
                       suite_line, suite_ok, guards_line, guards_ok)


def _entry(trust: dict | None, name: str) -> dict | None:
    return (trust or {}).get("capsules", {}).get(name)


def capsule_tests(trust: dict | None, name: str) -> TestCounts | None:
    t = (_entry(trust, name) or {}).get("tests")
    if not t:
        return None
    return TestCounts(t.get("passed", 0), t.get("failed", 0), t.get("skipped", 0))


def freshness(rec: dict, build: BuildView, trust: dict | None,
              evidence_dir: Path | str | None = None) -> Freshness:
    name = rec["capsule"]["name"]
    recorded = rec["fingerprint"]["value"]
    plugin = commands.plugin_of(rec)
    gone = getattr(build, "gone", None)
    if plugin and gone is not None and gone(plugin, name, rec["capsule"]["device"]):
        return Freshness("stale", recorded, None, f"plugin `{plugin}` as described now",
                         f"the plugin no longer defines capsule `{name}`", recomputed=True)
    current, why = build.fingerprint(name, rec["environment"])
    if current is not None:
        state = "fresh" if recorded == current else "stale"
        return Freshness(state, recorded, current, why,
                         "same build fingerprint" if state == "fresh" else
                         "the evidence was made for another build fingerprint", recomputed=True)
    entry = _entry(trust, name) or {}
    if entry.get("fingerprint"):
        state = "fresh" if recorded == entry["fingerprint"] else "stale"
        source = f"trust.json exported {trust.get('generated') or '?'}"
        unproven = plugin_sources.unproven_sources(trust, plugin) \
            if plugin and state == "fresh" else None
        if unproven:
            # the export's fingerprint was current when it ran; an edited plugin is not
            return Freshness("unknown", recorded, entry["fingerprint"], source,
                             f"freshness unknown: {unproven}; rerun `"
                             f"{commands.export_trust(rec, evidence_dir)}` (or pass --plugin "
                             f"{plugin} to the report to recompute it here)")
        return Freshness(state, recorded, entry["fingerprint"], source,
                         f"compared with the directory's trust export, because {why}")
    if plugin:
        why = (f"freshness unknown: no trust export of this directory names this capsule; "
               f"rerun `{commands.export_trust(rec, evidence_dir)}` (or pass --plugin {plugin} "
               "to the report to recompute it here)")
    return Freshness("unknown", recorded, None, "none", why)


def _short(sha: str | None) -> str:
    return sha[:7] if sha else "none"


def _judged_this_record(entry: dict, rec: dict, version: int) -> bool:
    """Whether the export's entry was made from this record (and not an earlier one of the same
    capsule): same status, and in version 2 the same record fingerprint."""
    if entry.get("status") is not None and entry["status"] != rec["status"]:
        return False
    return version < 2 or entry.get("record_fingerprint") == rec["fingerprint"]["value"]


def earned(rec: dict, fresh: Freshness, build: BuildView,
           trust: dict | None) -> tuple[str | None, str, str | None]:
    """(earned label or None, why, a note the earned cell shows itself, or None)."""
    entry = _entry(trust, rec["capsule"]["name"])
    exported = f"trust.json exported {(trust or {}).get('generated') or '?'}"
    if fresh.state == "stale":
        return None, "stale evidence earns nothing", None
    if fresh.recomputed:
        if entry is None:
            label, why = build.earned(rec)
            where = "no trust.json in this directory" if trust is None else \
                f"{exported} has no entry for this capsule"
            return label, f"{why}; computed here without test evidence ({where}; " \
                          f"{EXPORT_HINT})", None
        if entry["fingerprint"] != fresh.current:
            label, why = build.earned(rec)
            return label, (f"{why}; computed here: {exported} for another build fingerprint "
                           f"({_short(entry['fingerprint'])}), so it does not apply; "
                           f"{EXPORT_HINT}"), None
        if not _judged_this_record(entry, rec, trust["version"]):
            label, why = build.earned(rec)
            return label, (f"{why}; computed here: {exported} judged another record of this "
                           "capsule (rerun export-trust)"), None
        return entry["earned"], f"{entry.get('reason') or 'no reason given'} ({exported})", None
    exported_entry = entry is not None and fresh.current is not None and \
        entry.get("fingerprint") == fresh.current
    if exported_entry and not _judged_this_record(entry, rec, trust["version"]):
        return None, (f"{exported} judged another record of this capsule (status "
                      f"{entry.get('status')}), and this machine cannot judge it: rerun "
                      "export-trust where the record was made"), None
    if exported_entry:
        # The record's fingerprint is the one the export computed on its own machine; this one
        # cannot recompute it, so the export's verdict is shown as the export's.
        note = f"as exported {_exported_where(rec, trust)}" + (
            "; not recomputable here" if fresh.state == "fresh" else "")
        # the cell shows where an earned level came from; a record that earned nothing needs no
        # provenance there (the hover has it)
        return entry["earned"], f"{entry.get('reason') or 'no reason given'} ({exported}); " \
                                f"{note}", note if entry["earned"] else None
    where = "no trust.json in this directory" if trust is None else \
        f"{exported} has no fingerprint for this capsule"
    return None, f"unknown here: {where}, and {fresh.why}", None


def _exported_where(rec: dict, trust: dict) -> str:
    """Where and from which commit the export was made: `on NVIDIA H200 at commit 0c1d2e3`, or
    `on the CPU at ...` for CPU evidence (a GPU plays no part in it)."""
    env = (trust.get("environment") or {}) if trust["version"] >= 2 else {}
    if rec["capsule"]["device"] == "cpu":
        machine = "the CPU"
    else:
        machine = env.get("gpu") or rec["environment"].get("gpu") or "an unknown GPU"
    checkout = (trust.get("checkout") or {}) if trust["version"] >= 2 else {}
    commit = checkout.get("commit") or rec["environment"].get("git_commit")
    digest = checkout.get("digest")
    if commit:
        at = f"at commit {commit[:7]}"
    elif digest:
        # a copy without git (e.g. `git archive` on a GPU machine): the digest still names its sources
        at = f"from a checkout without git (checkout {digest[:8]})"
    else:
        at = "at an unknown commit"
    if commit and commit.endswith("+dirty"):
        # a tree that differs from that commit (a GPU machine's copy of a working tree): the
        # checkout digest names the sources the export saw (conformance/fingerprint.py)
        at += " with uncommitted changes" + (f" (checkout {digest[:8]})" if digest else "")
    return f"on {machine} {at}"


def within_claim(declared: str, earned_label: str | None) -> bool:
    """Whether what was earned meets what the capsule declares (nothing more to earn)."""
    from engine.types import TrustLevel
    try:
        return earned_label is not None and \
            TrustLevel.parse(earned_label).at_least(TrustLevel.parse(declared))
    except ValueError:
        return False


def as_declared(rec: dict, label: str | None, why: str) -> str:
    """`why` without what a higher level would need, where the capsule claims no higher level
    (a plugin declaring `fuzzed` needs no test-suite report to be what it says)."""
    if not within_claim(rec["capsule"]["trust_level"], label):
        return why
    for beyond in ("; not checked: ", "; not verified: "):
        if beyond in why:
            head, _, tail = why.partition(beyond)
            # where the verdict came from stays (the export's time, or "computed here")
            kept = [tail.index(m) for m in _PROVENANCE if m in tail]
            why = head + (tail[min(kept):] if kept else "")
    return why.replace(f"; {EXPORT_HINT}", "")


_PROVENANCE = (" (trust.json exported", "; computed here")


def next_step(rec: dict, fresh: Freshness, earned_label: str | None, trust: dict | None,
              evidence_dir: Path | str | None = None) -> tuple[str, str | None] | None:
    """What to do about a record, shown in the index row: (why it earns less than it could, the
    command that changes that, or None). None when there is nothing to do. Every command is
    whole (reports/commands.py): --device, and a plugin's --plugin."""
    name = rec["capsule"]["name"]
    status = rec["status"]
    rerun = commands.rerun(rec, evidence_dir)
    if status == "failed":
        return "its page has the counterexamples and replay commands", None
    if status in ("crashed", "timed-out"):
        return f"{status}: its page has the message; after a fix", rerun
    if status in STATUS_HINTS:
        return STATUS_HINTS[status], None
    if status != "passed":
        return f"no kernel verdict ({status}): its page says why", None
    if fresh.state == "stale":
        return "made for another build, so it earns nothing; rerun:", rerun
    if fresh.state == "unknown":
        if commands.plugin_of(rec):
            return ("freshness unknown: the plugin may have changed since; rerun",
                    commands.export_trust(rec, evidence_dir))
        return "this checkout cannot recompute its fingerprint: export trust where it was made", \
            None
    if within_claim(rec["capsule"]["trust_level"], earned_label):
        return None     # it earned what it declares: nothing more to do
    if earned_label == "fuzzed" and (trust is None or _entry(trust, name) is None):
        return ("checked needs this checkout's test evidence:",
                commands.export_trust(rec, evidence_dir, tests=True))
    if earned_label is None:
        return "earns nothing: hover for why", None
    return None
