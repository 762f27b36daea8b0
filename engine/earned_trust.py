"""The engine's side of `--require-evidence`: read the trust a `torchlean-conformance export-trust`
file says each capsule earned (the engine never imports the harness: this reads the file's
documented shape, `capsules.<name>.earned`), and plan a model's ops with the gate's evidence
obligation before any work starts."""
from __future__ import annotations

import json
from pathlib import Path

from engine.errors import GateRejectedError, TorchLeanError
from engine.types import TrustLevel

TRUST_FORMAT = "torchlean-conformance-trust"   # conformance/trust.py writes this tag
# Where runs write evidence and readers look for it by default, relative to the current
# directory: one <device>/ directory per device under it. The one home of this default (the
# engine reads trust exports from it and never imports the harness; conformance/evidence_dir.py
# and reports/ import it from here).
DEFAULT_EVIDENCE_ROOT = Path("reports") / "evidence"


class TrustExportError(TorchLeanError):
    """A trust export that cannot be read."""


class EvidenceMissingError(GateRejectedError):
    """--require-evidence: a capsule of the plan has no fresh evidence for this build."""


def default_trust_path(device: str) -> Path:
    return DEFAULT_EVIDENCE_ROOT / device / "trust.json"


def read_earned_trust(path) -> dict[str, TrustLevel | None]:
    """Capsule name -> earned trust (None: earned nothing). A missing file earns nothing for
    every capsule, so the gate names them all and says how to make the evidence."""
    path = Path(path)
    if not path.exists():
        return {}
    fix = "rerun `torchlean-conformance export-trust`"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrustExportError(f"trust export {path} cannot be read ({exc}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("format") != TRUST_FORMAT or \
            not isinstance(doc.get("capsules"), dict):
        raise TrustExportError(f"{path} is not a trust export (format "
                               f"{TRUST_FORMAT!r} with a `capsules` object); {fix}")
    return earned_levels(doc["capsules"], path, fix)


def earned_levels(capsules: dict, path, fix: str,
                  error: type[Exception] = TrustExportError) -> dict[str, TrustLevel | None]:
    """A trust export's `capsules` object as name -> earned TrustLevel (None: earned nothing);
    `error` (with `fix` in its message) for an entry that names no trust level. The harness's
    reader (conformance/trust.py) parses the same object through this."""
    out = {}
    for name, entry in capsules.items():
        label = entry.get("earned") if isinstance(entry, dict) else None
        try:
            out[name] = None if label is None else TrustLevel.parse(label)
        except Exception:
            raise error(f"{path}: capsule `{name}` earned {label!r}, not a trust level; "
                        f"{fix}") from None
    return out


def evidence_required(profile):
    """`profile` with the gate's evidence obligation added to its assurance policy."""
    import dataclasses
    return dataclasses.replace(profile, assurance=profile.assurance.with_evidence_required())


def check_plan(session, ops, trust_path) -> None:
    """Plan every op of the model at once under the session's profile and earned trust: an
    EvidenceMissingError naming each capsule without fresh evidence, before any step runs."""
    try:
        session.profile.accept_graph(list(ops), earned_trust=session.earned_trust)
    except GateRejectedError as exc:
        device = session.device.label
        where = f"{trust_path}" + ("" if Path(trust_path).exists() else " (no such file)")
        raise EvidenceMissingError(
            f"--require-evidence: the plan's capsules need fresh evidence for this build in "
            f"{where}; run `torchlean-conformance run --device {device}` and "
            f"`torchlean-conformance export-trust --device {device}` (or pass --trust PATH). "
            f"{exc}") from None
