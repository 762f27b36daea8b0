"""One capsule's campaign in its own process: `python -m conformance.worker SPEC_JSON`. It writes
the evidence record (atomically) and its replay files; the parent only watches the exit. SIGINT
(Ctrl-C reaches the whole process group) ends it at once with status 130 and no traceback: the
parent records the capsule as interrupted."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from conformance import evidence
from conformance.campaign import Settings, check_case, describe, run_campaign
from conformance.evidence_dir import replay_path
from conformance.shrink import shrink, write_replay


def resolve(name: str, plugin: str | None):
    """(capsule, handler) from the registry, or from the plugin that defines it."""
    if plugin:
        from conformance.plugins import plugin_handlers
        table = plugin_handlers(plugin)
        if name not in table:
            raise KeyError(f"plugin `{plugin}` defines no capsule `{name}`; it defines: "
                           f"{', '.join(table) or 'none'}")
        return table[name]
    from engine.registry import registry
    return registry().get(name)


def shrinker(capsule, handler, settings: Settings, evidence_dir: Path, plugin, device: str):
    """The campaign's `shrink_to(case, result, reasons)`: shrink while the case still fails for
    one of `reasons`, write a replay file, return the counterexample fields."""
    def shrink_to(case, result, reasons):
        models: dict = {}

        def still_fails(c):
            r = check_case(capsule, handler, c, models, poison=settings.poison)
            return r.failures if r.reasons() & reasons else None
        small = shrink(case, still_fails, settings.shrink_budget)
        final = check_case(capsule, handler, small, models, poison=settings.poison)
        failures = final.failures or result.failures
        path = replay_path(evidence_dir, capsule.name, case.cls, case.index)
        command = write_replay(path, capsule.name, small, failures, plugin, device)
        return {"shrunk": describe(small), "shrunk_failures": [f.to_json() for f in failures[:3]],
                "replay_file": str(path), "replay_command": command}
    return shrink_to


def run_one(spec: dict) -> dict:
    capsule, handler = resolve(spec["capsule"], spec.get("plugin"))
    settings = Settings(**spec["settings"])
    out_dir = Path(spec["evidence_dir"])
    campaign = run_campaign(capsule, handler, settings, shrink_to=shrinker(
        capsule, handler, settings, out_dir, spec.get("plugin"), spec["device"]))
    record = evidence.make_record(capsule, campaign, evidence.build_fingerprint(capsule, handler),
                                  spec["device"], spec.get("plugin"))
    evidence.write_atomic(evidence.record_path(out_dir, capsule.name), record)
    return record


def _interrupted(signum, frame) -> None:
    os._exit(130)


def main() -> int:
    signal.signal(signal.SIGINT, _interrupted)
    spec = json.loads(sys.argv[1])
    import warnings
    warnings.filterwarnings("ignore", category=RuntimeWarning)   # IEEE specials are the point
    from engine.runtime.deterministic import set_deterministic_reductions
    set_deterministic_reductions(bool(spec["settings"].get("deterministic_reductions")))
    record = run_one(spec)
    print(json.dumps({"capsule": record["capsule"]["name"], "status": record["status"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
