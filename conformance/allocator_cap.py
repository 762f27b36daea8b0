"""Allocator-cap checks, each configuration in a fresh subprocess (the cap is read once per process).

A probe allocates 32 blocks of 65536 float32 (256 KiB each), releases them and reports
allocator_stats; a churn run makes 100,000 allocations of mixed sizes under a small cap. On the
CPU parity stub the same suite checks the stub's contract: zero cached bytes, zero cap, wrapper
live bytes back to zero.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

CAP_VAR = "TORCHLEAN_CUDA_CACHE_CAP_BYTES"
BLOCK_BYTES = 65536 * 4
BLOCKS = 32
CHURN_OPS = 100_000
CHURN_CAP = 1 << 20
# cudaMemGetInfo moves in the driver's 2 MiB allocation granules, not in our block sizes.
DRIVER_GRANULE = 2 << 20

# (name, value of the variable or None for unset, expected cap or None when it must be rejected)
CONFIGURATIONS = [
    ("capped", "1048576", 1048576),
    ("control", "0", 0),
    ("unset", None, 0),
    ("malformed", "1MiB", None),
    ("overflow", "99999999999999999999999999", None),
    ("empty", "", None),
    ("negative", "-1", None),
    ("leading space", " 1024", None),
    ("trailing space", "1024 ", None),
    ("hex", "0x100", None),
    ("exponent", "1e6", None),
    ("plus sign", "+5", None),
    ("largest valid", "18446744073709551615", 18446744073709551615),
    ("overflow by one", "18446744073709551616", None),
]


@dataclass
class CapOutcome:
    name: str
    value: str | None
    passed: bool
    observed: dict
    problems: list[str] = field(default_factory=list)


@dataclass
class CapReport:
    backend: str
    outcomes: list[CapOutcome] = field(default_factory=list)

    @property
    def held(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and self.held == len(self.outcomes)

    def to_record(self) -> dict:
        return {"suite": "allocator-cap", "backend": self.backend, "held": self.held,
                "configurations": len(self.outcomes), "passed": self.passed,
                "outcomes": [asdict(o) for o in self.outcomes]}


# --- the probe: runs inside the fresh subprocess ------------------------------------------------

def _probe(mode: str) -> dict:
    import warnings
    from engine.runtime.allocator import allocator_stats
    from engine.runtime.native import native_available
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native = native_available()
        before = allocator_stats()
        result = {"native": native, "before": asdict(before)}
        if mode == "probe":
            result.update(_probe_blocks(native))
        else:
            result.update(_churn(native))
        # The cap never changes within a process: a new value in the environment is ignored.
        os.environ[CAP_VAR] = "4096"
        result["cap_after_env_change"] = allocator_stats().cache_cap_bytes
    result["warnings"] = [str(w.message) for w in caught]
    return result


def _probe_blocks(native: bool) -> dict:
    from engine.runtime.allocator import allocator_stats
    if native:
        import cupy
        from engine.runtime.allocator import install
        install()
        blocks = [cupy.empty(BLOCK_BYTES // 4, dtype=cupy.float32) for _ in range(BLOCKS)]
        cupy.cuda.Device().synchronize()
    else:
        from engine.runtime import device_buffer
        import numpy as np
        blocks = [device_buffer.upload(np.zeros(BLOCK_BYTES // 4, np.float32), "cpu")
                  for _ in range(BLOCKS)]
    held = asdict(allocator_stats())
    del blocks
    return {"held": held, "released": asdict(allocator_stats())}


def _churn(native: bool) -> dict:
    import random
    from engine.runtime.allocator import allocator_stats, installed
    rng = random.Random(2026)
    sizes = [1 << k for k in range(8, 19)] + [3000, 12345, 65536 * 4 + 4]
    live: list = []
    max_cache = 0
    if native:
        import cupy
        from engine.runtime.allocator import install
        cache = install()
        cupy.cuda.Device().synchronize()
        start = allocator_stats()
        for i in range(CHURN_OPS):
            live.append(cupy.empty(rng.choice(sizes) // 4, dtype=cupy.float32))
            if len(live) > 48 or rng.random() < 0.5:
                live.pop(rng.randrange(len(live)))
                max_cache = max(max_cache, cache.cache_bytes)
        live.clear()
        cupy.cuda.Device().synchronize()
        max_cache = max(max_cache, installed().cache_bytes)
        cached_sizes = [size for size, ptrs in installed()._free.items() for _ in ptrs]
    else:
        import numpy as np
        from engine.runtime import device_buffer
        start = allocator_stats()
        for i in range(CHURN_OPS):
            live.append(device_buffer.upload(np.empty(rng.choice(sizes) // 4, np.float32), "cpu"))
            if len(live) > 48 or rng.random() < 0.5:
                live.pop(rng.randrange(len(live)))
        live.clear()
        cached_sizes = []
    return {"start": asdict(start), "end": asdict(allocator_stats()), "max_cache": max_cache,
            "cached_sizes": cached_sizes}


# --- the parent: one subprocess per configuration, then the checks ------------------------------

def _run_subprocess(mode: str, value: str | None, timeout: float) -> dict:
    env = dict(os.environ)
    env.pop(CAP_VAR, None)
    if value is not None:
        env[CAP_VAR] = value
    code = f"import json; from conformance.allocator_cap import _probe; print(json.dumps(_probe({mode!r})))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"allocator probe ({mode}, {CAP_VAR}={value!r}) exited "
                           f"{proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_probe(name: str, value: str | None, expected: int | None, obs: dict) -> list[str]:
    problems = []
    held, released = obs["held"], obs["released"]
    named = [w for w in obs["warnings"] if CAP_VAR in w]
    if not obs["native"]:
        # The parity stub frees host buffers directly: it caches nothing and reads no cap.
        if released["cache_bytes"] or released["cache_cap_bytes"]:
            problems.append(f"stub reported cache={released['cache_bytes']} "
                            f"cap={released['cache_cap_bytes']}, expected 0 and 0")
        if held["live_bytes"] - obs["before"]["live_bytes"] < BLOCKS * BLOCK_BYTES:
            problems.append(f"stub live bytes did not count the {BLOCKS} blocks held")
        if released["live_bytes"] != obs["before"]["live_bytes"]:
            problems.append(f"live bytes {released['live_bytes']} did not return to "
                            f"{obs['before']['live_bytes']} after release")
        return problems
    cap = released["cache_cap_bytes"]
    want_cap = 0 if expected is None else expected
    if cap != want_cap:
        problems.append(f"cap is {cap}, expected {want_cap}")
    if expected is None and not named:
        problems.append(f"no warning naming {CAP_VAR} for rejected value {value!r}")
    if expected is not None and named:
        problems.append(f"unexpected warning for accepted value {value!r}: {named[0]}")
    if obs["cap_after_env_change"] != cap:
        problems.append(f"cap changed within the process to {obs['cap_after_env_change']}")
    if released["live_bytes"] != obs["before"]["live_bytes"]:
        problems.append(f"live bytes {released['live_bytes']} after release, expected "
                        f"{obs['before']['live_bytes']}")
    cached = released["cache_bytes"]
    if want_cap == 0 or want_cap >= BLOCKS * BLOCK_BYTES:
        if cached != BLOCKS * BLOCK_BYTES:
            problems.append(f"unbounded cache holds {cached} bytes, expected all "
                            f"{BLOCKS * BLOCK_BYTES}")
    else:
        if cached > want_cap:
            problems.append(f"cache {cached} is above the cap {want_cap}")
        if cached < BLOCK_BYTES:
            problems.append(f"cache {cached} holds no block")
        if want_cap - cached >= BLOCK_BYTES:
            problems.append(f"cache {cached} is a block or more below the cap {want_cap}")
    return problems


def _check_churn(obs: dict) -> list[str]:
    problems = []
    start, end = obs["start"], obs["end"]
    if end["live_bytes"] != start["live_bytes"]:
        problems.append(f"live bytes ended at {end['live_bytes']}, started at "
                        f"{start['live_bytes']}: a leak")
    if obs["native"]:
        if obs["max_cache"] > CHURN_CAP or end["cache_bytes"] > CHURN_CAP:
            problems.append(f"cache reached {obs['max_cache']} bytes, over the cap {CHURN_CAP}")
        drop = start["mem_free"] - end["mem_free"]
        # A cached block keeps the driver granules it touches: a block of s bytes spans at most
        # ceil(s / granule) + 1 of them, whatever else shared those granules.
        pinned = sum((-(-size // DRIVER_GRANULE) + 1) * DRIVER_GRANULE
                     for size in obs.get("cached_sizes", []))
        if drop > pinned + DRIVER_GRANULE:
            problems.append(f"device free memory is {drop} bytes below its start, more than the "
                            f"{pinned} bytes of driver granules its {len(obs.get('cached_sizes', []))}"
                            f" cached blocks can hold plus one granule")
    elif end["wrapper_live"] != start["wrapper_live"]:
        problems.append(f"{end['wrapper_live'] - start['wrapper_live']} buffer wrappers leaked")
    return problems


def run_allocator_cap(timeout: float = 300.0) -> CapReport:
    report: CapReport | None = None
    for name, value, expected in CONFIGURATIONS:
        obs = _run_subprocess("probe", value, timeout)
        if report is None:
            report = CapReport("cuda" if obs["native"] else "cpu-parity-stub")
        problems = _check_probe(name, value, expected, obs)
        report.outcomes.append(CapOutcome(name, value, not problems, obs, problems))
    obs = _run_subprocess("churn", str(CHURN_CAP), timeout)
    problems = _check_churn(obs)
    report.outcomes.append(CapOutcome(f"churn: {CHURN_OPS} allocations under a {CHURN_CAP}-byte "
                                      "cap", str(CHURN_CAP), not problems, obs, problems))
    return report
