"""Earned trust: what the evidence supports for the current build, exported for the engine's gate.
The rules (TRUST_BOUNDARIES.md, "Earned trust", states them for users):

fuzzed needs a campaign record that is
- fresh: its fingerprint is the capsule's current build fingerprint, and it was judged by this
  harness version (settings.harness);
- complete: status `passed`, and the status its counts give is `passed` too
  (conformance/record_integrity.py recomputes it: no failed case, no failure reason, no worst
  error/bound over 1, no harness error, some case judged); every generator class of the op
  judged at least MIN_CASES_PER_CLASS cases (skipped cases do not count); the VJP checked when
  the op has one; the inner-product identity not failed; run with allocation poisoning on
  (unwritten outputs would pass unseen otherwise).
checked needs fuzzed and
- shape and layout contracts backed by runtime guards, and the guard suite passed on this device
  for this checkout (suite-guards.json);
- test evidence from this checkout's own test run (a JUnit file with the manifest the run wrote,
  see conformance/junit_evidence.py): at least one test that exercises the capsule on its device
  passed, and none of those failed or errored. Skipped and xfailed tests are not passes.
verified needs checked and an exhaustive sweep record (conformance/exhaustive/,
<evidence-dir>/exhaustive-<capsule>.json) that is
- exhaustive (every float32 input on the GPU: not a sampled --stride sweep) and `passed`;
- fresh: made for the capsule's current build fingerprint, judged by this harness version;
- from this machine's environment: the same GPU model, driver and CUDA runtime as the export's.
Evidence from another GPU or driver earns nothing beyond checked.
Anything else earns nothing (null), and the reason says which rule was not met. A record that
contradicts itself, names another capsule, op, provider or device than its file and directory, or
is not a regular file inside the evidence directory is refused: named on stderr (`unusable`), and
it earns nothing.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from conformance import evidence
from conformance.fingerprint import checkout_digest, fingerprint, harness_digest
from conformance.formats import TRUST_FORMAT   # the export's tag
from conformance.jsonfile import UnusableFileError, read_object, read_tagged
from conformance.record_integrity import contradictions
from engine.earned_trust import earned_levels   # the export's entries, as the engine reads them
from engine.types import Evidence, TrustLevel

TRUST_VERSION = 2
MIN_CASES_PER_CLASS = 2     # the quick campaign's count: fewer judged cases earn nothing


class TrustFileError(Exception):
    """A trust export that cannot be read, or cannot be written where it was asked to go."""


class TrustOutError(TrustFileError):
    """--out names a directory (or a path under a file): the export is one file."""


def campaign_problem(record: dict, capsule, handler) -> str | None:
    """Why a record earns nothing (None: it earns at least `fuzzed`)."""
    from conformance import generators
    current = fingerprint(capsule, handler)["value"]
    if (record.get("fingerprint") or {}).get("value") != current:
        return "stale: the evidence was made for another build fingerprint"
    settings = record.get("settings") or {}
    if settings.get("harness") != harness_digest():
        return ("stale: the record was judged by another version of the harness; rerun the "
                "campaign")
    if record.get("status") != "passed":
        return f"campaign status `{record.get('status')}`"
    differs = peer_differences(record)
    if differs:   # it met the peer's contract, not TorchLean's: no trust in TorchLean's terms
        return (f"meets {record['differences'].get('peer', 'its peer')}'s own contract but "
                f"differs from TorchLean's: {differs}")
    if not settings.get("poison"):
        return "the campaign ran without allocation poisoning: unwritten outputs could pass"
    by_class = (record.get("cases") or {}).get("by_class") or {}
    for cls in generators.classes_for(capsule.op):
        run = (by_class.get(cls) or {}).get("run", 0)
        if not isinstance(run, int) or run < MIN_CASES_PER_CLASS:
            return (f"too few cases: class `{cls}` judged {run}, the minimum is "
                    f"{MIN_CASES_PER_CLASS} per class")
    if capsule.op.needs_vjp and not record.get("vjp_checked"):
        return "the VJP was not checked"
    if (record.get("identity") or {}).get("failed"):
        return "the inner-product identity failed"
    wrong = contradictions(record)    # the status its counts give must be `passed` too
    if wrong:
        return "the record contradicts itself: " + "; ".join(wrong)
    return None


def peer_differences(record: dict) -> str:
    """The clauses of a peer's contract that explained elements of this record, in words ('' for
    none): `tie-gradient-split x12 elements`."""
    from conformance.peers.classify import in_words
    return in_words(record.get("differences"))


def guards_status(evidence_dir: Path) -> dict:
    """The guard suite's verdict in this directory, for this checkout."""
    path = Path(evidence_dir) / "suite-guards.json"
    if not os.path.lexists(path):
        return {"status": "missing", "note": f"no {path.name}: run `torchlean-conformance run "
                                             "--suite guards`"}
    try:
        doc = read_object(path, "rerun `torchlean-conformance run --suite guards`",
                          inside=evidence_dir)
    except UnusableFileError as exc:
        return {"status": "missing", "note": str(exc)}
    if doc.get("checkout") != checkout_digest():
        return {"status": "missing", "note": f"{path.name} was made for another checkout: rerun "
                                             "`torchlean-conformance run --suite guards`"}
    if doc.get("selection"):   # a `run --capsule` guard run: most ops' cases did not run
        return {"status": "partial", "note": f"{path.name} checked only the ops of --capsule "
                                             f"{' '.join(map(str, doc['selection']))}: rerun "
                                             "`torchlean-conformance run --suite guards`"}
    ok = doc.get("passed") is True
    return {"status": "passed" if ok else "failed",
            "note": f"{path.name}: {doc.get('rejected')} of {doc.get('tried')} bad inputs "
                    "rejected" + ("" if ok else " (FAILED)")}


def earned_for(record: dict | None, capsule, handler, tests=None,
               guards: dict | None = None) -> tuple[str | None, str, dict]:
    """(earned trust label or None, why, test counts) for one capsule. `tests` is a
    junit_evidence.TestEvidence or None; `guards` the guards_status of the directory."""
    if record is None:
        return None, "no evidence record", {}
    problem = campaign_problem(record, capsule, handler)
    if problem:
        return None, problem, {}
    why = ["fuzz campaign passed"]
    missing = []
    if not all(c.evidence is Evidence.runtime_guard
               for c in (capsule.shape_contract, capsule.layout_contract)):
        missing.append("shape/layout contracts are not runtime-guarded")
    if guards is None or guards.get("status") != "passed":
        missing.append("guard suite " + ((guards or {}).get("status") or "not given") +
                       (f" ({guards['note']})" if guards and guards.get("note") else ""))
    counts = {}
    if tests is None:
        missing.append("no test-suite report (--tests junit.xml from this checkout's test run)")
    else:
        mine = tests.for_capsule(capsule.name, capsule.device.label)
        counts = mine.to_json()
        at_test = (tests.fingerprints.get(capsule.device.label) or {}).get(capsule.name)
        if at_test != fingerprint(capsule, handler)["value"]:
            missing.append("the test run did not see this build of the capsule")
        elif mine.failed:
            missing.append(f"{mine.failed} test(s) of this capsule failed: "
                           f"{', '.join(mine.tests[:3])}")
        elif not mine.passed:
            missing.append(f"no test exercising `{capsule.name}` on {capsule.device.label} passed "
                           f"({mine.not_passed} skipped or xfailed)")
        else:
            why.append(f"{mine.passed} test(s) of this capsule passed")
    if missing:
        return TrustLevel.fuzzed.label, "; ".join(why + ["not checked: " + "; ".join(missing)]), \
            counts
    return TrustLevel.checked.label, "; ".join(why + ["runtime guards and guard suite passed"]), \
        counts


ENV_KEYS = ("gpu", "driver", "cuda_runtime")


def exhaustive_problem(record: dict | None, capsule, handler, env: dict) -> str | None:
    """Why an exhaustive sweep record does not make a checked capsule `verified` (None: it
    does). `env` is conformance.evidence.environment() of the exporting process."""
    if record is None:
        return "no exhaustive sweep record"
    if record.get("mode") != "exhaustive" or record.get("device") != "cuda":
        return "the sweep was sampled (--stride or --device cpu), not exhaustive"
    if record.get("status") != "passed":
        return f"exhaustive sweep status `{record.get('status')}`"
    if (record.get("fingerprint") or {}).get("value") != \
            fingerprint(capsule, handler)["value"]:
        return "stale exhaustive sweep: made for another build fingerprint"
    if record.get("harness") != harness_digest():
        return "stale exhaustive sweep: judged by another version of the harness"
    rec_env = record.get("environment") or {}
    for key in ENV_KEYS:
        if env.get(key) is None or rec_env.get(key) != env.get(key):
            return (f"the exhaustive sweep ran on another {key.replace('_', ' ')} "
                    f"({rec_env.get(key)!r}, here {env.get(key)!r})")
    return None


def verified_by(record: dict) -> str:
    env = record.get("environment") or {}
    from conformance.evidence import cuda_versions
    return f"verified by exhaustion on {env.get('gpu')}, {cuda_versions(env)}"


def _with_exhaustive(earned, why, evidence_dir, capsule, handler, env):
    """Raise a checked capsule to verified when its exhaustive sweep record allows it."""
    from conformance.exhaustive.plan import record_file
    path = record_file(evidence_dir, capsule.name)
    if earned != TrustLevel.checked.label or not os.path.lexists(path):
        return earned, why
    try:
        record = read_object(path, "rerun `torchlean-conformance exhaustive`",
                             inside=evidence_dir)
    except UnusableFileError as exc:
        return earned, f"{why}; not verified: {exc}"
    problem = exhaustive_problem(record, capsule, handler, env)
    if problem:
        return earned, f"{why}; not verified: {problem}"
    return TrustLevel.verified.label, f"{why}; {verified_by(record)}"


def export_trust(evidence_dir: Path, out_path: Path, targets: list[tuple], device: str,
                 tests=None) -> dict:
    """Write the trust each target (capsule, handler) earned; returns the document. `tests` is a
    junit_evidence.TestEvidence (load it first: a bad --tests file is the caller's error)."""
    out_path = check_out_path(out_path)
    guards = guards_status(evidence_dir)
    env = evidence.environment(device)
    capsules, unusable = {}, []
    for capsule, handler in targets:
        # <dir>/<name>.json (names are dotted identifiers): not record_path, whose refusal of a
        # link out of the directory would stop the whole export instead of this capsule's entry
        path = Path(evidence_dir) / f"{capsule.name}.json"
        record, unreadable = None, None
        if os.path.lexists(path):
            try:
                record = evidence.load_checked_record(path, evidence_dir,
                                                      capsule_identity(capsule), device)
            except evidence.EvidenceError as exc:
                unreadable = str(exc)
                unusable.append(unreadable)
        earned, why, counts = earned_for(record, capsule, handler, tests, guards)
        earned, why = _with_exhaustive(earned, why, evidence_dir, capsule, handler, env)
        capsules[capsule.name] = {
            "declared": capsule.trust_level.label, "earned": earned,
            "reason": unreadable or why,
            "fingerprint": fingerprint(capsule, handler)["value"],
            "record_fingerprint": None if record is None else record["fingerprint"].get("value"),
            "status": None if record is None else record.get("status"), "tests": counts}
    doc = {"format": TRUST_FORMAT, "version": TRUST_VERSION, "device": device,
           "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "checkout": {"commit": env.get("git_commit"), "digest": checkout_digest()},
           "environment": {k: env.get(k) for k in ("gpu", "driver", "cuda_runtime")},
           "rules": {"min_cases_per_class": MIN_CASES_PER_CLASS, "poison_required": True,
                     "harness": harness_digest()},
           "test_suite": None if tests is None else tests.to_json(),
           "guards": guards, "unusable": unusable, "capsules": capsules}
    evidence.write_atomic(Path(out_path), doc)
    return doc


def capsule_identity(capsule) -> dict:
    """What a capsule's record must name: record_integrity.misplacement's `capsule`."""
    return {"name": capsule.name, "op": capsule.op.label, "provider": capsule.provider.label,
            "device": capsule.device.label}


def check_out_path(out_path) -> Path:
    """The export's path, or TrustOutError when it cannot be a file (checked before any work)."""
    out = Path(out_path)
    if out.is_dir():
        raise TrustOutError(f"--out {out} is a directory; export-trust writes one file: pass a "
                            f"file path, e.g. --out {out / 'trust.json'}")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise TrustOutError(f"--out {out}: {parent} is a file, not a directory; pass a file "
                            "path in a directory")
    return out


def load_earned_trust(path) -> dict[str, TrustLevel | None]:
    """Capsule name -> earned TrustLevel (None: earned nothing), for
    `BackendProfile.accept_graph(ops, earned_trust=...)` and `Session(earned_trust=...)`."""
    fix = "run `torchlean-conformance export-trust` first"
    try:
        doc = read_tagged(path, "format", TRUST_FORMAT, "a trust export", fix)
    except UnusableFileError as exc:
        raise TrustFileError(f"cannot read trust export {exc}") from None
    caps = doc.get("capsules")
    if not isinstance(caps, dict):
        raise TrustFileError(f"{path}: trust export without a `capsules` object; {fix}")
    return earned_levels(caps, path, fix, TrustFileError)
