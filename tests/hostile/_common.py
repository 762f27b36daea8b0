"""The capsule every hostile kernel declares, and the wrong answer they compute."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from conformance.plugins import PluginEntry
from engine.capsule import standard_capsule
from engine.types import (BackendOp, Contraction, Device, NumericalPolicy, Provider, Reduction,
                          Rounding, Subnormals, TrustLevel, VJPMode)

EXACT = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                        Contraction.not_applicable, Reduction.not_applicable)


def entry(cls: str, forward, device: Device = Device.cpu) -> list[PluginEntry]:
    cap = standard_capsule(BackendOp.abs, Provider.external, device, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.torchlean_tape, policy=EXACT,
                           source_file=f"tests/hostile/{cls}.py", name=f"hostile.{cls}")
    return [PluginEntry(cap, forward)]


def wrong_abs(a):
    """abs, except the last element is one more: wrong on every non-empty input."""
    out = np.abs(np.asarray(a)).astype(np.float32)
    if out.size:
        out.flat[-1] = out.flat[-1] + np.float32(1)
    return out


def forged_record(cls: str) -> dict:
    """A record that claims `passed` for this capsule, as a forger would write it."""
    return {"schema": "torchlean.evidence", "schema_version": 1,
            "capsule": {"name": f"hostile.{cls}", "op": "abs"}, "status": "passed",
            "cases": {"total": 500, "failed": 0, "skipped": 0, "by_class": {}},
            "failure_reasons": {}, "counterexamples": [], "fingerprint": {"value": "forged"},
            "environment": {}, "settings": {}, "forged": True}


def evidence_target(cls: str) -> Path | None:
    """Where the record of this capsule goes: the test tells the forgers (a real forger would
    guess the default reports/evidence/<device>/)."""
    d = os.environ.get("HOSTILE_EVIDENCE_DIR")
    return Path(d) / f"hostile.{cls}.json" if d else None


def forge(cls: str) -> None:
    path = evidence_target(cls)
    if path is not None:
        path.write_text(json.dumps(forged_record(cls)))
