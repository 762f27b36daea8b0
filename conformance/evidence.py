"""Evidence records: one schema-versioned JSON file per capsule per run, written atomically, with
the capsule record, environment and build fingerprint; loading and validating them.

Record fields (conformance/evidence_schema.json is the contract): schema, schema_version, capsule,
policy_label, status, message, settings, error_model, cases, stats, observed, identity,
vjp_checked, failure_reasons, counterexamples, timing, environment, fingerprint, plugin, created;
optionally run (the writing run's nonce, seed and seed source). Readers refuse a record that
contradicts itself or its place (conformance/record_integrity.py).
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from conformance import fingerprint as _fp
from conformance.evidence_dir import record_path  # noqa: F401  (part of this module's API)
from conformance.formats import EVIDENCE_SCHEMA
from conformance.jsonfile import UnusableFileError, read_object, write_atomic  # noqa: F401
from conformance.record_integrity import refusal
from engine.capsule import KernelCapsule

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
SCHEMA_PATH = Path(__file__).with_name("evidence_schema.json")
STATUSES = ("passed", "failed", "harness-error", "crashed", "timed-out", "interrupted",
            "unsupported")
# Statuses a resumed run may reuse: verdicts for these settings and this build. An interrupted
# capsule was never judged, so it runs again.
FINISHED = ("passed", "failed", "harness-error", "crashed", "timed-out", "unsupported")
REPO_ROOT = Path(__file__).resolve().parent.parent
REGENERATE = ("rerun `torchlean-conformance run --capsule NAME --fresh` to regenerate it, or "
              "delete the file")


class EvidenceError(Exception):
    """An evidence file that cannot be read or does not follow the schema."""


# Fingerprints live in conformance/fingerprint.py (a record's: fingerprint.fingerprint); this
# name is the evidence module's API for plugins that say what their build is.
register_fingerprinter = _fp.register_fingerprinter


# --- environment ------------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


@functools.lru_cache(maxsize=1)
def _git_commit() -> str | None:
    """HEAD, with "+dirty" when tracked files differ from it (a copied tree may carry stale git
    metadata: the checkout digest, not this, is what binds evidence to code)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0 or not head.stdout.strip():
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = status.returncode != 0 or bool(status.stdout.strip())
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:
        return None


def cuda_versions(env: dict) -> str:
    """'driver API 13.0, CUDA runtime 13.2' from the evidence's integers (13000, 13020: what
    cudaDriverGetVersion / cudaRuntimeGetVersion return, major * 1000 + minor * 10), which stay
    in the records as they are; not nvidia-smi's driver release (e.g. 580.x)."""
    def text(v):
        return "?" if not isinstance(v, int) else f"{v // 1000}.{(v % 1000) // 10}"
    return f"driver API {text(env.get('driver'))}, CUDA runtime {text(env.get('cuda_runtime'))}"


def _gpu() -> dict:
    from engine.runtime import loader
    info = {"gpu": None, "driver": None, "cuda_runtime": None, "compile_options": None}
    try:
        from engine.runtime.native import native_available
        if not native_available():
            return info
        from cupy.cuda import runtime
        props = runtime.getDeviceProperties(0)
        name = props["name"]
        info["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        info["driver"] = runtime.driverGetVersion()
        info["cuda_runtime"] = runtime.runtimeGetVersion()
        info["compile_options"] = list(loader.OPTIONS)
    except Exception:
        pass
    return info


def environment(device: str) -> dict:
    cupy_version = None
    if device == "cuda":
        cupy_version = next((v for v in (_version("cupy-cuda13x"), _version("cupy-cuda12x"),
                                          _version("cupy")) if v), None)
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "numpy": _version("numpy"), "mpmath": _version("mpmath"), "cupy": cupy_version,
            **(_gpu() if device == "cuda" else
               {"gpu": None, "driver": None, "cuda_runtime": None, "compile_options": None}),
            "git_commit": _git_commit()}


# --- the record ---------------------------------------------------------------------------------

def capsule_record(capsule: KernelCapsule) -> dict:
    def contract(c):
        return {"claim": c.claim.label, "summary": c.summary, "evidence": c.evidence.label,
                "source_file": c.provenance.source_file,
                "native_symbol": c.provenance.native_symbol,
                "declared_bound": (None if c.declared_bound is None else
                                   _declared_bound(c.declared_bound))}
    p = capsule.numerical_policy
    return {"name": capsule.name, "op": capsule.op.label, "provider": capsule.provider.label,
            "device": capsule.device.label, "trust_level": capsule.trust_level.label,
            "supports_forward": capsule.supports_forward, "vjp_mode": capsule.vjp_mode.label,
            "numerical_policy": {"rounding": p.rounding.label, "subnormals": p.subnormals.label,
                                 "contraction": p.contraction.label,
                                 "reduction": p.reduction.label, "label": p.label},
            "contracts": {k: contract(c) for k, c in capsule.contracts.items()},
            "notes": capsule.notes}


def make_record(capsule: KernelCapsule, campaign: dict, fingerprint: dict, device: str,
                plugin: str | None = None) -> dict:
    """A full evidence record around a campaign's result (or a crashed/timed-out stub)."""
    rec = {"schema": EVIDENCE_SCHEMA, "schema_version": SCHEMA_VERSION,
           "capsule": capsule_record(capsule),
           "policy_label": capsule.numerical_policy.label,
           "status": campaign["status"], "message": campaign.get("message"),
           "settings": campaign.get("settings", {}),
           "error_model": campaign.get("error_model", {"forward": {}, "vjp": {}}),
           "cases": campaign.get("cases", {"total": 0, "failed": 0, "skipped": 0,
                                           "by_class": {}, "skipped_notes": []}),
           "stats": campaign.get("stats"), "observed": campaign.get("observed"),
           "identity": campaign.get("identity"), "vjp_checked": campaign.get("vjp_checked", False),
           "failure_reasons": campaign.get("failure_reasons", {}),
           "harness_errors": campaign.get("harness_errors", []),
           "counterexamples": campaign.get("counterexamples", []),
           **({"differences": campaign["differences"]} if "differences" in campaign else {}),
           "timing": campaign.get("timing", {"seconds": None, "cases_per_second": None}),
           "environment": environment(device), "fingerprint": fingerprint, "plugin": plugin,
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    return _jsonable(rec)


def _jsonable(x):
    """Replace non-finite floats (JSON has none) by strings, recursively."""
    if isinstance(x, float):
        if x != x:
            return "nan"
        if x in (float("inf"), float("-inf")):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        return _jsonable(x.item())
    return x


def _type_problems(rec: dict) -> list[str]:
    """What is missing or of the wrong JSON type in a record (readers rely on these)."""
    want = {"capsule": dict, "status": str, "settings": dict, "cases": dict,
            "failure_reasons": dict, "counterexamples": list, "fingerprint": dict,
            "environment": dict}
    problems = [f"`{k}` is missing" if k not in rec else
                f"`{k}` is a {type(rec[k]).__name__}, expected a {t.__name__}"
                for k, t in want.items() if not isinstance(rec.get(k), t)]
    for k in ("stats", "observed", "identity"):
        if rec.get(k) is not None and not isinstance(rec[k], dict):
            problems.append(f"`{k}` is a {type(rec[k]).__name__}, expected an object or null")
    cap = rec.get("capsule")
    if isinstance(cap, dict):
        problems += [f"`capsule.{k}` is not a string" for k in ("name", "op", "provider", "device")
                     if not isinstance(cap.get(k), str)]
    cases = rec.get("cases")
    if isinstance(cases, dict):
        problems += [f"`cases.{k}` is not a whole number" for k in ("total", "failed")
                     if not isinstance(cases.get(k), int)]
        if not isinstance(cases.get("by_class"), dict):
            problems.append("`cases.by_class` is not an object")
    if isinstance(rec.get("status"), str) and rec["status"] not in STATUSES:
        problems.append(f"`status` is {rec['status']!r}, not one of {', '.join(STATUSES)}")
    fp = rec.get("fingerprint")
    if isinstance(fp, dict) and not isinstance(fp.get("value"), str):
        problems.append("`fingerprint.value` is not a string")
    return problems


def check_record(rec) -> list[str]:
    """Every reason a parsed document is not a usable evidence record (empty: usable)."""
    if not isinstance(rec, dict):
        return [f"holds a JSON {type(rec).__name__}, not an object"]
    if rec.get("schema") != EVIDENCE_SCHEMA:
        return [f"is not an evidence record (schema={rec.get('schema')!r}, expected "
                f"{EVIDENCE_SCHEMA!r})"]
    if rec.get("schema_version") not in READABLE_VERSIONS:
        return [f"has schema_version {rec.get('schema_version')!r}; this harness reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}"]
    return _type_problems(rec)


def load_record(path: Path, inside=None) -> dict:
    """A usable evidence record, or EvidenceError naming the file, the problem and the fix. With
    `inside` (its evidence directory), a file whose real path leaves the directory is refused."""
    try:
        rec = read_object(path, REGENERATE, inside)
    except UnusableFileError as exc:
        raise EvidenceError(str(exc)) from None
    problems = check_record(rec)
    if problems:
        raise EvidenceError(f"{path}: unusable evidence record: {'; '.join(problems)}; "
                            f"{REGENERATE}")
    return rec


def load_checked_record(path: Path, evidence_dir, capsule: dict | None = None,
                        device: str | None = None) -> dict:
    """load_record of a file in `evidence_dir`, refused (EvidenceError) when it contradicts
    itself or names another capsule than its place (conformance/record_integrity.py: the file
    name, `capsule`'s op, provider and device, the directory's `device`)."""
    rec = load_record(path, inside=evidence_dir)
    why = refusal(rec, path, capsule, device)
    if why:
        raise EvidenceError(f"{path}: refused: the record {why}; {REGENERATE}")
    return rec


def load_records(evidence_dir: Path, problems: list[str] | None = None) -> list[dict]:
    """Every usable evidence record in a directory (trust exports, suite records and replay files
    are not evidence records); unusable and refused ones are skipped and described in
    `problems`."""
    out = []
    for p in sorted(Path(evidence_dir).glob("*.json")):
        if p.name == "trust.json" or p.name.startswith("suite-"):
            continue
        try:
            out.append(load_checked_record(p, evidence_dir))
        except EvidenceError as exc:
            if problems is not None:
                problems.append(str(exc))
    return out


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate(record: dict) -> None:
    """Raise jsonschema.ValidationError when the record does not follow the schema."""
    import jsonschema
    jsonschema.validate(record, schema())


def resumable(path: Path, fingerprint: dict, settings: dict, plugin: str | None) -> dict | None:
    """The existing record when it is a finished verdict made for the same build, settings
    (seed, cases, mode, deterministic reductions, poisoning, harness version) and plugin, that
    agrees with itself and its file name. Anything else (a FIFO or a link out of the directory
    included) is run again, and its file replaced."""
    if not os.path.lexists(path):
        return None
    try:
        rec = load_checked_record(path, Path(path).parent)
    except EvidenceError:
        return None
    same = (rec.get("status") in FINISHED and rec.get("fingerprint", {}).get("value")
            == fingerprint["value"] and rec.get("settings") == settings
            and rec.get("plugin") == plugin)
    return rec if same else None


def _declared_bound(bound) -> dict:
    """A capsule's declared bound as its record holds it (an absolute term only where declared:
    records of bounds without one stay as they were)."""
    out = {"ulps": bound.ulps, "reason": bound.reason}
    if getattr(bound, "absolute", 0.0):
        out["absolute"] = bound.absolute
    return out
