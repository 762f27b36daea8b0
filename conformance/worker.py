"""The judge of one capsule's campaign, in its own process: `python -m conformance.worker`, its
spec (capsule, plugin, settings, device, evidence directory, the run's nonce and seed) read as JSON
from standard input, never from its arguments or environment (other processes of the user can
read those).

The judge never imports plugin code: the capsule's kernels run in a kernel process
(conformance/isolation) that gets only each call's arrays. The judge generates the cases,
computes references and bounds, compares, shrinks, and writes the record (atomically) with the
run's nonce, after it has ended the kernel process and everything that process started; the
parent counts the record only when the nonce is its own. A kernel process that exits, with any
code, hangs or breaks the protocol before answering makes this run's verdict `crashed` (or
`timed-out`). SIGINT and SIGTERM end the judge at once (130, 143), after its kernel process and
the kernel's descendants: the parent records the capsule as interrupted."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from conformance.fingerprint import fingerprint
from conformance.formats import EVIDENCE_SCHEMA

# The judge's own modules (campaign, evidence, shrinking: kernel_host.JUDGE_MODULES) are imported
# where they are used, not here: `main` forks the kernel process first (isolation/prefork.py), and
# the fork is to hold nothing of the judge but public code imported for both.


class CapsuleResolveError(KeyError):
    """The capsule asked for is not defined by the registry or the plugin, or its description
    from the kernel process does not hold together."""


def resolve(name: str, plugin: str | None, device: str | None = None):
    """(capsule, handler) from the registry, or from the plugin that defines it, in this
    process. Only code that runs kernels by design uses it (the in-process suites of our own
    capsules, the harness's tests); a plugin's capsules are judged through `open_remote`."""
    if plugin:
        from conformance.plugins import plugin_handlers
        table = plugin_handlers(plugin, device=device)
        if name not in table:
            raise CapsuleResolveError(f"plugin `{plugin}` defines no capsule `{name}`; it "
                                      f"defines: {', '.join(table) or 'none'}")
        return table[name]
    from engine.registry import registry
    return registry().get(name)


def open_remote(name: str, plugin: str | None, device: str, deterministic: bool,
                env: dict | None = None, forked=None):
    """(kernel process, capsule, RemoteHandler, fingerprint) for one capsule. The capsule and
    fingerprint of a built-in come from the registry here (the engine's code, trusted); a
    plugin's capsule is rebuilt from the kernel process's description and checked, and its
    fingerprint joins the plugin's own account to this process's hash of the plugin's files.
    `forked`: the kernel process main() forked (a fresh interpreter when None)."""
    from conformance.isolation.capsule_codec import CapsuleDataError, capsule_from_data
    from conformance.isolation.remote import KernelProcess, RemoteHandler
    from conformance.isolation.plugin_files import plugin_fingerprint
    kp = KernelProcess(device, plugin, deterministic, env, forked=forked)
    try:
        table = kp.load([name])
        entry = table.get(name)
        if entry is None:
            raise CapsuleResolveError(f"{'plugin `' + plugin + '`' if plugin else 'the registry'}"
                                      f" defines no capsule `{name}` for device `{device}`")
        if plugin:
            try:
                capsule = capsule_from_data(entry.get("capsule"))
            except CapsuleDataError as exc:
                raise CapsuleResolveError(f"plugin `{plugin}` described capsule `{name}` "
                                          f"unusably: {exc}") from None
            if capsule.name != name or capsule.device.label != device:
                raise CapsuleResolveError(
                    f"plugin `{plugin}` described `{name}` as `{capsule.name}` on device "
                    f"`{capsule.device.label}`; expected `{name}` on `{device}`")
            fp = plugin_fingerprint(plugin, entry.get("fingerprint"))
        else:
            capsule, real = resolve(name, None)
            fp = fingerprint(capsule, real)
        handler = RemoteHandler(kp, capsule, bool(entry.get("has_vjp")),
                                bool(entry.get("has_declines")))
        return kp, capsule, handler, fp
    except BaseException:
        kp.close()
        raise


def shrinker(capsule, handler, settings, evidence_dir: Path, plugin, device: str,
             contract=None):
    """The campaign's `shrink_to(case, result, reasons)`: shrink while the case still fails for
    one of `reasons` (judged under the same peer contract, if any), write a replay file, return
    the counterexample fields."""
    from conformance.campaign import check_case, describe, first_per_reason
    from conformance.evidence_dir import replay_path
    from conformance.shrink import shrink, write_replay
    written: set[Path] = set()

    def shrink_to(case, result, reasons):
        models: dict = {}

        def still_fails(c):
            r = check_case(capsule, handler, c, models, poison=settings.poison,
                           contract=contract)
            return r.failures if r.reasons() & reasons else None
        small = shrink(case, still_fails, settings.shrink_budget)
        final = check_case(capsule, handler, small, models, poison=settings.poison,
                           contract=contract)
        failures = final.failures or result.failures
        path = _unwritten(replay_path(evidence_dir, capsule.name, case.cls, case.index),
                          written)
        command = write_replay(path, capsule.name, small, failures, plugin, device)
        # the reasons this counterexample stands for first: the console shows one of them
        shown = first_per_reason(failures, reasons)[:3]
        return {"shrunk": describe(small), "shrunk_failures": [f.to_json() for f in shown],
                "replay_file": str(path), "replay_command": command}
    return shrink_to


def _unwritten(path: Path, written: set[Path]) -> Path:
    """`path`, or `<stem>-2.json`, `-3`, ... when this campaign already wrote it: a case and its
    sibling (generators.draw_sibling) share a class and index, and each counterexample's replay
    command must replay its own case."""
    n, free = 2, path
    while free in written:
        free, n = path.with_name(f"{path.stem}-{n}{path.suffix}"), n + 1
    written.add(free)
    return free


def run_one(spec: dict, forked=None) -> dict:
    from conformance import evidence
    from conformance.campaign import Settings, run_campaign
    from conformance.isolation.remote import KernelProcessError, PluginLoadError
    from conformance.peers.contracts import contract_for
    settings = Settings(**spec["settings"])
    out_dir = Path(spec["evidence_dir"])
    plugin, device = spec.get("plugin"), spec["device"]
    kp = capsule = fp = None
    try:
        kp, capsule, handler, fp = open_remote(spec["capsule"], plugin, device,
                                               settings.deterministic_reductions, forked=forked)
        # a peer's contract is ours, chosen by the plugin spec the user gave, not by the kernel
        contract = contract_for(plugin, capsule.name)
        campaign = run_campaign(capsule, handler, settings, contract=contract,
                                shrink_to=shrinker(capsule, handler, settings, out_dir, plugin,
                                                   device, contract))
    except (KernelProcessError, PluginLoadError, CapsuleResolveError) as exc:
        output = getattr(exc, "output", None) or (kp.tap.summary(0) if kp else {})
        campaign = {"status": getattr(exc, "status", "crashed"), "message": str(exc)[:4000],
                    "settings": settings.to_json()}
        if capsule is None:
            capsule, fp = _stub_capsule(spec)
        record = evidence.make_record(capsule, campaign, fp, device, plugin) if capsule else \
            _bare_record(spec, campaign)
        return _finish(record, spec, kp, output)
    record = evidence.make_record(capsule, campaign, fp, device, plugin)
    return _finish(record, spec, kp, None)


def _stub_capsule(spec: dict):
    """The capsule and fingerprint a record of a run that never judged a case can name: the
    registry's for a built-in, none for a plugin (its description is not to be believed)."""
    if spec.get("plugin"):
        return None, None
    try:
        capsule, real = resolve(spec["capsule"], None)
        return capsule, fingerprint(capsule, real)
    except Exception:
        return None, None


def _bare_record(spec: dict, campaign: dict) -> dict:
    from conformance import evidence
    return {"schema": EVIDENCE_SCHEMA, "schema_version": evidence.SCHEMA_VERSION,
            "capsule": {"name": spec["capsule"]}, "status": campaign["status"],
            "message": campaign["message"], "settings": campaign["settings"],
            "cases": {"total": 0, "failed": 0, "skipped": 0, "by_class": {}, "skipped_notes": []},
            "failure_reasons": {}, "counterexamples": [], "fingerprint": {},
            "environment": evidence.environment(spec["device"]), "plugin": spec.get("plugin")}


def _finish(record: dict, spec: dict, kp, output) -> dict:
    """End the kernel process and its descendants, then write the record with the run's nonce."""
    from conformance import evidence
    summary = kp.close() if kp is not None else {}
    from conformance.isolation.reaper import kill_children
    kill_children()
    record["run"] = {"nonce": spec["nonce"], "seed": spec["settings"].get("seed"),
                     "seed_source": spec.get("seed_source", "given"),
                     "kernel_output": output or summary or {"bytes": 0, "kept": ""}}
    evidence.write_atomic(evidence.record_path(Path(spec["evidence_dir"]), spec["capsule"]),
                          record)
    return record


def _stop(code: int):
    def handler(signum, frame) -> None:
        from conformance.isolation.reaper import kill_children
        kill_children(limit_s=2.0)
        os._exit(code)
    return handler


def main() -> int:
    signal.signal(signal.SIGINT, _stop(130))
    signal.signal(signal.SIGTERM, _stop(143))
    from conformance.isolation.reaper import become_subreaper, not_dumpable
    not_dumpable()
    become_subreaper()
    from conformance.isolation.prefork import fork_kernel_host
    forked = fork_kernel_host()   # before the spec (seed, nonce) is read: the fork holds none of it
    spec = json.loads(sys.stdin.read())
    import warnings
    warnings.filterwarnings("ignore", category=RuntimeWarning)   # IEEE specials are the point
    from engine.runtime.deterministic import set_deterministic_reductions
    set_deterministic_reductions(bool(spec["settings"].get("deterministic_reductions")))
    from conformance.families import load_contracts
    load_contracts()    # the user's op contracts the run names (CONTRACTS_ENV), before any capsule
    record = run_one(spec, forked)
    print(json.dumps({"capsule": record["capsule"]["name"], "status": record["status"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
