"""The commands the report suggests, whole, so that one pasted runs: every command names its
--device; a plugin's capsule its --plugin (the record says which) and, for an op the engine does
not have, its --op-contracts; and a directory other than the device's default its --evidence-dir.
Without --plugin a plugin's capsule is unknown to `run` (exit 2)."""
from __future__ import annotations

import shlex
from pathlib import Path

from conformance.evidence_dir import DEFAULT_EVIDENCE_ROOT

PROG = "torchlean-conformance"
# What stands in for a plugin or contract module the record does not name (an unreadable
# record, a user op without counterexamples): the command says what is missing, not a guess.
PLUGIN_PLACEHOLDER = "MODULE:ATTR"


def plugin_of(rec: dict) -> str | None:
    """The `--plugin module:attr` the record was made with (None: a built-in capsule). The
    record may be one the reader refused: nothing in it is taken for granted."""
    plugin = rec.get("plugin")
    return plugin if isinstance(plugin, str) and plugin else None


def contracts_of(rec: dict) -> str | None:
    """The `--op-contracts` a plugin record was judged with: its replay commands name them (the
    run that wrote it had them loaded); for a user op without such a command, a placeholder,
    since `run` refuses that op without its contract."""
    found = rec.get("counterexamples")
    for ce in found if isinstance(found, list) else []:
        cmd = ce.get("replay_command") if isinstance(ce, dict) else None
        try:
            words = shlex.split(cmd) if isinstance(cmd, str) else []
        except ValueError:
            continue
        if "--op-contracts" in words[:-1]:
            return words[words.index("--op-contracts") + 1]
    cap = rec.get("capsule")
    op = cap.get("op") if isinstance(cap, dict) else None
    return PLUGIN_PLACEHOLDER if plugin_of(rec) and not _builtin_op(op) else None


def _builtin_op(op) -> bool:
    from engine.types import BackendOp
    return any(o.label == op for o in BackendOp)


def flags(device: str, evidence_dir: Path | str | None, plugin: str | None = None,
          contracts: str | None = None) -> str:
    """` --device D [--plugin P [--op-contracts C]] [--evidence-dir DIR]`."""
    out = f" --device {shlex.quote(device)}"
    if plugin:
        out += f" --plugin {shlex.quote(plugin)}"
        if contracts:
            out += f" --op-contracts {shlex.quote(contracts)}"
    if evidence_dir is not None and Path(evidence_dir) != DEFAULT_EVIDENCE_ROOT / device:
        out += f" --evidence-dir {shlex.quote(str(evidence_dir))}"
    return out


def run_command(name: str, device: str, evidence_dir, plugin: str | None = None,
                contracts: str | None = None, fresh: bool = False) -> str:
    return (f"{PROG} run --capsule {shlex.quote(name)}{' --fresh' if fresh else ''}"
            f"{flags(device, evidence_dir, plugin, contracts)}")


def rerun(rec: dict, evidence_dir, fresh: bool = False) -> str:
    """The command that reruns the record's capsule into its directory."""
    cap = rec["capsule"]
    return run_command(cap["name"], cap["device"], evidence_dir, plugin_of(rec),
                       contracts_of(rec), fresh)


def export_trust(rec: dict, evidence_dir, tests: bool = False) -> str:
    """The export that judges the record's directory again (with the record's plugin)."""
    cap = rec["capsule"]
    return (f"{PROG} export-trust"
            f"{flags(cap['device'], evidence_dir, plugin_of(rec), contracts_of(rec))}"
            + (" --tests junit.xml" if tests else ""))
