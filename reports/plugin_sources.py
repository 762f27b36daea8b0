"""Whether a plugin's evidence is fresh, as far as the report can tell. A plugin's fingerprint
joins its kernel process's account of its build to the judge's hash of its source files
(conformance/isolation/plugin_files.py): the report cannot recompute it without running the
plugin's code, which it never does on a record's word. So a plugin record is

- fresh or stale by recomputation when the user names the plugin to the report (`report --plugin
  MODULE:ATTR`): it is described by a kernel process of its own, exactly as `export-trust` does;
- else fresh by the trust export only when the export provably saw today's sources: it was made
  from this very checkout (the same checkout digest) and every source file of the plugin lies in
  what that digest covers;
- else of unknown freshness, never `fresh`: an edited plugin must not look current until
  `export-trust` is rerun."""
from __future__ import annotations

import functools
from pathlib import Path

from conformance.isolation.plugin_files import plugin_files


class PluginLoadFailed(Exception):
    """`report --plugin`: the plugin cannot be described (import error, no entries, ...)."""


@functools.lru_cache(maxsize=1)
def _checkout_digest() -> str:
    from conformance.fingerprint import checkout_digest
    return checkout_digest()


def _covered(path: Path) -> bool:
    """Whether the checkout digest hashes this file (conformance/fingerprint.py decides what it
    covers: its source folders and suffixes)."""
    from conformance.fingerprint import _CHECKOUT_DIRS, _CHECKOUT_SUFFIXES, REPO_ROOT
    try:
        parts = path.resolve().relative_to(REPO_ROOT).parts
    except ValueError:
        return False
    return len(parts) > 1 and parts[0] in _CHECKOUT_DIRS and path.suffix in _CHECKOUT_SUFFIXES


def unproven_sources(trust: dict, spec: str) -> str | None:
    """None when the trust export provably saw the plugin's current sources; else why not."""
    module = spec.partition(":")[0]
    digest = ((trust.get("checkout") or {}) if trust.get("version", 1) >= 2 else {}).get("digest")
    if not digest:
        return "the trust export does not say which sources it saw (no checkout digest)"
    files = plugin_files(spec)
    if not files:
        return f"the plugin's module `{module}` is not found from here to hash its sources"
    outside = [f for f in files if not _covered(f)]
    if outside:
        return (f"the plugin's source {outside[0]} lies outside this checkout's digest, so no "
                "hash here says whether it changed since the export")
    if digest != _checkout_digest():
        return ("this checkout's sources (the plugin's included) differ from those the export "
                f"saw (checkout digest {digest[:12]}), and the report runs no plugin code to "
                "recompute its fingerprint")
    return None


class PluginBuild:
    """A BuildView (reports/current.py) that also knows the capsules of the plugins the user
    named to the report: their fingerprints and earned trust recomputed as export-trust does, the
    plugin described by a kernel process of its own (conformance/isolation/describe.py)."""

    def __init__(self, base, specs: list[str], wanted: set[tuple[str, str]]) -> None:
        """`wanted`: the (plugin, device) pairs the evidence names; only the plugins in `specs`
        are described."""
        self._base = base
        self._found: dict[str, tuple] = {}         # capsule name -> (capsule, handler)
        self._described: set[tuple[str, str]] = set()
        named = sorted({spec for spec, _ in wanted})
        for spec in specs:
            if spec not in named:
                raise PluginLoadFailed(
                    f"--plugin {spec}: no record in these evidence directories was made with it "
                    f"(they name {', '.join(named) or 'no plugin'}); pass a plugin they name")
        for spec, device in sorted(wanted):
            if spec in specs:
                self._describe(spec, device)

    def _describe(self, spec: str, device: str) -> None:
        if device == "cuda":
            from engine.runtime.native import native_available
            if not native_available():      # its records stay judged by the export's rules
                return
        from conformance.isolation.describe import describe_plugin
        from conformance.plugins import PluginError
        try:
            table = describe_plugin(spec, device)
        except PluginError as exc:
            raise PluginLoadFailed(str(exc)) from None
        self._described.add((spec, device))
        for name, (capsule, handler) in table.items():
            if capsule.device.label == device:
                self._found[name] = (capsule, handler)

    def registered(self) -> list[dict]:
        return self._base.registered()

    def fingerprint(self, name: str, environment: dict) -> tuple[str | None, str]:
        if name in self._found:
            return (self._found[name][1].fingerprint["value"],
                    f"plugin `{self._found[name][1].plugin}` as described now (--plugin)")
        return self._base.fingerprint(name, environment)

    def earned(self, record: dict) -> tuple[str | None, str]:
        name = record["capsule"]["name"]
        if name not in self._found:
            return self._base.earned(record)
        from conformance.trust import earned_for
        capsule, handler = self._found[name]
        return earned_for(record, capsule, handler)[:2]

    def gone(self, spec: str, name: str, device: str) -> bool:
        """Whether the plugin, described now, no longer defines a capsule its record names."""
        return (spec, device) in self._described and name not in self._found
