"""Evidence records: one schema-versioned JSON file per capsule per run, written atomically, with
the capsule record, environment and build fingerprint; loading and validating them.

Record fields (conformance/evidence_schema.json is the contract): schema, schema_version, capsule,
policy_label, status, message, settings, error_model, cases, stats, observed, identity,
vjp_checked, failure_reasons, counterexamples, timing, environment, fingerprint, plugin, created.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from engine.capsule import KernelCapsule, KernelHandler
from engine.types import Provider

SCHEMA = "torchlean-conformance-evidence"
SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("evidence_schema.json")
FINISHED = ("passed", "failed", "crashed", "timed-out", "unsupported")
REPO_ROOT = Path(__file__).resolve().parent.parent


class EvidenceError(Exception):
    """An evidence file that cannot be read or does not follow the schema."""


# --- build fingerprints, pluggable per provider ---------------------------------------------------

def _sha(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _module_source(module_name: str) -> bytes:
    mod = importlib.import_module(module_name)
    try:
        return inspect.getsource(mod).encode()
    except (OSError, TypeError):
        return module_name.encode()


def _op_module(capsule: KernelCapsule) -> str | None:
    """The engine.ops family module holding the op's local VJP rule (part of what runs)."""
    from engine.ops import LOCAL_VJP
    rule = LOCAL_VJP.get(capsule.op)
    return rule.__module__ if rule is not None else None


def _handler_modules(handler: KernelHandler) -> list[str]:
    mods = []
    for fn in (handler.forward, handler.vjp):
        mod = getattr(inspect.getmodule(fn), "__name__", None) if fn is not None else None
        if mod and mod not in mods:
            mods.append(mod)
    return mods


def _source_fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    mods = _handler_modules(handler)
    op_mod = _op_module(capsule)
    if op_mod and op_mod not in mods:
        mods.append(op_mod)
    parts = [_module_source(m) for m in mods]
    for fn in (handler.forward, handler.vjp):   # closures defined in one module still differ
        code = getattr(fn, "__code__", None)
        if code is not None:
            parts.append(code.co_code + repr(code.co_consts).encode())
    return {"value": _sha(parts), "method": "sha256 of module sources",
            "inputs": mods + [f"{capsule.name}:code"]}


def _cuda_fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    """The kernel source's build fingerprint from engine.runtime.loader (source bytes, compile
    options, architecture, NVRTC version) for the capsule's .cu file, plus the handler and op
    module sources (the launch code and the local VJP rule). Without a GPU the architecture is
    unknown: the source bytes and options are hashed instead, and the method says so."""
    base = _source_fingerprint(capsule, handler)
    source = capsule.value_contract.provenance.source_file
    if not source.endswith(".cu"):
        return base
    name = Path(source).name
    try:
        loader = importlib.import_module("engine.runtime.loader")
    except ImportError:
        return base
    try:
        native, method = loader.build_fingerprint(name), "engine.runtime.loader.build_fingerprint"
    except Exception:
        raw = loader.source_text(name).encode() + "\0".join(loader.OPTIONS).encode()
        native, method = hashlib.sha256(raw).hexdigest(), "sha256 of kernel source + options"
    return {"value": _sha([native.encode(), base["value"].encode()]),
            "method": f"{method} + module sources", "inputs": [source] + base["inputs"]}


def _composed_fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    """Composed ops (provider torchlean) run our .cu kernels between library calls: hash every
    .cu file the source map names for them, with the module sources."""
    base = _source_fingerprint(capsule, handler)
    try:
        from engine import native_sources
        from engine.runtime import loader
        src = getattr(native_sources, "COMPOSED_ATTENTION", None)
    except ImportError:
        return base
    if src is None or capsule.op.label != "scaled_dot_product_attention":
        return base
    files = [file for file, _ in src.kernels() if file]
    natives = []
    for name in dict.fromkeys(files):
        try:
            natives.append(loader.build_fingerprint(name))
        except Exception:   # no GPU here: the source bytes and options stand in
            natives.append(hashlib.sha256(loader.source_text(name).encode() +
                                          "\0".join(loader.OPTIONS).encode()).hexdigest())
    return {"value": _sha([n.encode() for n in natives] + [base["value"].encode()]),
            "method": "kernel build fingerprints + module sources",
            "inputs": [f"engine/csrc/cuda/{f}" for f in dict.fromkeys(files)] + base["inputs"]}


FINGERPRINTERS: dict[Provider, Callable[[KernelCapsule, KernelHandler], dict]] = {
    Provider.native_cuda: _cuda_fingerprint,
    Provider.cublas: _cuda_fingerprint,
    Provider.cufft: _cuda_fingerprint,
    Provider.torchlean: _composed_fingerprint,
}


def register_fingerprinter(provider: Provider, fn: Callable) -> None:
    """Let a provider say what its build is: fn(capsule, handler) -> {value, method, inputs}."""
    FINGERPRINTERS[provider] = fn


def build_fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    """The provider's fingerprinter, or the hash of the handler's module sources (reference
    capsules: engine/providers/reference.py and the op's family module)."""
    return FINGERPRINTERS.get(capsule.provider, _source_fingerprint)(capsule, handler)


# --- environment ------------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=5)
        return (out.stdout.strip() or None) if out.returncode == 0 else None
    except Exception:
        return None


def _gpu() -> dict:
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
        loader = importlib.import_module("engine.runtime.loader")
        opts = getattr(loader, "compile_options", None) or getattr(loader, "OPTIONS", None)
        info["compile_options"] = [str(o) for o in (opts() if callable(opts) else opts)] \
            if opts else None
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
                                   {"ulps": c.declared_bound.ulps,
                                    "reason": c.declared_bound.reason})}
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
    rec = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
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
           "counterexamples": campaign.get("counterexamples", []),
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


def record_path(evidence_dir: Path, capsule_name: str) -> Path:
    return Path(evidence_dir) / f"{capsule_name}.json"


def write_atomic(path: Path, data: dict | str) -> None:
    """Write to a temporary file beside `path`, then os.replace: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_record(path: Path) -> dict:
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"cannot read evidence file {path}: {exc}; rerun "
                            "`torchlean-conformance run` to regenerate it") from None
    if rec.get("schema") != SCHEMA:
        raise EvidenceError(f"{path} is not an evidence record (schema={rec.get('schema')!r}, "
                            f"expected {SCHEMA!r})")
    return rec


def load_records(evidence_dir: Path) -> list[dict]:
    """Every evidence record in a directory (trust.json and replay files are skipped)."""
    out = []
    for p in sorted(Path(evidence_dir).glob("*.json")):
        if p.name == "trust.json":
            continue
        try:
            out.append(load_record(p))
        except EvidenceError:
            continue
    return out


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate(record: dict) -> None:
    """Raise jsonschema.ValidationError when the record does not follow the schema."""
    import jsonschema
    jsonschema.validate(record, schema())


def resumable(path: Path, fingerprint: dict, settings: dict, plugin: str | None) -> dict | None:
    """The existing record when it is finished and was made for the same build and settings."""
    if not Path(path).exists():
        return None
    try:
        rec = load_record(path)
    except EvidenceError:
        return None
    same = (rec.get("status") in FINISHED and rec.get("fingerprint", {}).get("value")
            == fingerprint["value"] and rec.get("settings") == settings
            and rec.get("plugin") == plugin)
    return rec if same else None
