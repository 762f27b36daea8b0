"""A plugin's capsules as the judge's side knows them, without importing the plugin: a kernel
process loads it and describes each entry; the capsule is rebuilt from that data and checked, and
its fingerprint is joined to the judge's own hash of the plugin's files (plugin_files.py).
Selection, resumption and the trust export read plugins through this."""
from __future__ import annotations

from dataclasses import dataclass

from conformance.plugins import PluginError
from engine.capsule import KernelHandler


@dataclass(frozen=True)
class DescribedHandler:
    """What the judge's side knows of a plugin entry's handler: no code, only facts. It stands
    where a KernelHandler stood for selection, resumption and the export."""
    name: str
    op: object
    provider: object
    device: object
    plugin: str
    fingerprint: dict
    has_vjp: bool
    has_declines: bool
    forward: None = None
    vjp: None = None
    declines: None = None
    unavailable: None = None


def describe_plugin(spec: str, device: str, env: dict | None = None,
                    timeout: float = 300.0) -> dict:
    """Capsule name -> (capsule, DescribedHandler) for every entry of plugin `spec` (any device:
    the caller filters). PluginError, with the plugin's own diagnosis, when it cannot load."""
    from conformance.isolation.capsule_codec import CapsuleDataError, capsule_from_data
    from conformance.isolation.plugin_files import plugin_fingerprint
    from conformance.isolation.remote import KernelProcess, KernelProcessError, PluginLoadError
    kp = KernelProcess(device, spec, env=env)
    try:
        table = kp.load(None, timeout=timeout)
    except PluginLoadError as exc:
        raise PluginError(str(exc)) from None
    except KernelProcessError as exc:
        kept = (exc.output.get("kept") or "").strip()[-1500:]
        raise PluginError(f"--plugin `{spec}`: {exc}; it defines no capsules this run can audit"
                          + (f"; its output ended: {kept}" if kept else "")
                          + "; fix the plugin module") from None
    finally:
        kp.close()
    out = {}
    for name, entry in table.items():
        try:
            cap = capsule_from_data(entry.get("capsule"))
        except CapsuleDataError as exc:
            raise PluginError(f"--plugin `{spec}` described entry `{name}` unusably: {exc}; "
                              "fix the plugin module") from None
        if cap.name != name:
            raise PluginError(f"--plugin `{spec}` described entry `{name}` as capsule "
                              f"`{cap.name}`; fix the plugin module")
        out[name] = (cap, DescribedHandler(
            name, cap.op, cap.provider, cap.device, spec,
            plugin_fingerprint(spec, entry.get("fingerprint")), bool(entry.get("has_vjp")),
            bool(entry.get("has_declines"))))
    return out


@dataclass(frozen=True)
class FingerprintedHandler(KernelHandler):
    """A plugin's own handler, imported in this process, carrying the fingerprint its kernel
    process's description gave it (so its evidence matches what run and export-trust compute)."""
    fingerprint: dict | None = None


def in_process(name: str, spec: str, described: DescribedHandler):
    """(capsule, handler) of a plugin entry imported HERE, for the suites that call kernels in
    their own process (the exhaustive sweep: TRUST_BOUNDARIES.md says what that trusts)."""
    import dataclasses
    from conformance.worker import resolve
    cap, real = resolve(name, spec, described.device.label)
    fields = {f.name: getattr(real, f.name) for f in dataclasses.fields(real)}
    return cap, FingerprintedHandler(**fields, fingerprint=described.fingerprint)
