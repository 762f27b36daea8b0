"""Allocator-cap checks, each configuration in a fresh subprocess (the cap is read once per process).

A probe allocates 32 blocks of 65536 float32 (256 KiB each), releases them and reports
allocator_stats; a churn run makes 100,000 allocations of mixed sizes under a small cap. On the
CPU parity stub the same suite checks the stub's contract: zero cached bytes, zero cap, wrapper
live bytes back to zero.

The churn is judged by what this process holds from the driver (the cache's device_bytes:
cudaMalloc'd and not yet cudaFree'd), never by the device-wide free memory of cudaMemGetInfo,
which other processes on the same GPU move; that drop is kept in the record as context only.
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
# Bytes asked for per churn allocation (each becomes float32 elements: size // 4 of them).
CHURN_SIZES = [1 << k for k in range(8, 19)] + [3000, 12345, 65536 * 4 + 4]
CHURN_LARGEST = max(size // 4 * 4 for size in CHURN_SIZES)

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
    def applicable(self) -> bool:
        """The cap exists only in the CUDA device cache: on the CPU parity stub the suite checks
        the parser and the stub's contract, and says the cap itself was not tested."""
        return self.backend == "cuda"

    @property
    def held(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and self.held == len(self.outcomes)

    def to_record(self) -> dict:
        return {"suite": "allocator-cap", "backend": self.backend, "held": self.held,
                "configurations": len(self.outcomes), "passed": self.passed,
                "applicable": self.applicable,
                "note": None if self.applicable else NOT_APPLICABLE,
                "outcomes": [asdict(o) for o in self.outcomes]}


NOT_APPLICABLE = ("not applicable on the CPU parity stub: the device reuse cache and its cap exist "
                  "only on CUDA, so no cap was enforced or tested here; checked instead: the cap "
                  "parser on every configuration's value, and the stub's contract (zero cache "
                  "and cap, host wrappers freed)")


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
    sizes = CHURN_SIZES
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
    end = allocator_stats()
    return {"start": asdict(start), "end": asdict(end), "max_cache": max_cache,
            "cached_sizes": cached_sizes, "largest_block": CHURN_LARGEST,
            # Context only, never the verdict: other processes move the device's free memory.
            "device_free_drop_context": start.mem_free - end.mem_free}


# --- the parent: one subprocess per configuration, then the checks ------------------------------

def _run_subprocess(mode: str, value: str | None, timeout: float,
                    hide_gpus: bool = False) -> dict:
    env = dict(os.environ)
    env.pop(CAP_VAR, None)
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
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
        problems.extend(_check_driver_bytes(obs))
    elif end["wrapper_live"] != start["wrapper_live"]:
        problems.append(f"{end['wrapper_live'] - start['wrapper_live']} buffer wrappers leaked")
    return problems


def _check_driver_bytes(obs: dict) -> list[str]:
    """What this process holds from the driver (device_bytes): at the end no more than its live
    and cached blocks, and grown over the churn by at most the cap plus the largest block."""
    start, end = obs["start"], obs["end"]
    if "device_bytes" not in start or "device_bytes" not in end:
        return ["the churn observation has no device_bytes: the probe ran an allocator without "
                "driver accounting; rerun with this checkout's engine"]
    problems = []
    held, live, cached = end["device_bytes"], end["live_bytes"], end["cache_bytes"]
    if held > live + cached:
        problems.append(f"this process holds {held} bytes from the driver at the end, more than "
                        f"its {live} live + {cached} cached bytes: {held - live - cached} bytes "
                        "were never given back")
    growth = held - start["device_bytes"]
    largest = obs.get("largest_block", CHURN_LARGEST)
    if growth > CHURN_CAP + largest:
        problems.append(f"driver bytes held grew by {growth} over the churn, more than the cap "
                        f"{CHURN_CAP} plus the largest block {largest}")
    return problems


def _parser_outcomes() -> list[CapOutcome]:
    """Each configuration's value through parse_cache_cap, in this process (the stub's part)."""
    from engine.runtime.allocator import parse_cache_cap
    out = []
    for name, value, expected in CONFIGURATIONS:
        cap, warning = parse_cache_cap(value)
        problems = []
        if cap != (0 if expected is None else expected):
            problems.append(f"parsed as {cap}, expected {0 if expected is None else expected}")
        if (expected is None and value is not None) != (warning is not None and CAP_VAR in warning):
            problems.append("warning expected" if warning is None else f"unexpected warning: "
                                                                         f"{warning}")
        out.append(CapOutcome(f"parser: {name}", value, not problems,
                              {"cap": cap, "warning": warning}, problems))
    return out


def run_allocator_cap(device: str | None = None, timeout: float = 300.0) -> CapReport:
    """The suite for `device`: "cpu" checks the CPU path's contract (the stub's) even where a GPU
    is visible, its probes run with CUDA_VISIBLE_DEVICES empty; otherwise the device cache where
    this machine has one (the CUDA configurations), else the stub. A CPU run on a GPU machine
    (scripts/check.sh --cuda's CPU part) once ran the CUDA configurations again and wrote them
    into the CPU evidence as the CPU's."""
    hide = device == "cpu"
    first = _run_subprocess("probe", None, timeout, hide)
    if not first["native"]:
        report = CapReport("cpu-parity-stub", _parser_outcomes())
        problems = _check_probe("stub contract", None, 0, first)
        report.outcomes.append(CapOutcome("stub contract: zero cache and cap, wrappers freed",
                                          None, not problems, first, problems))
        return report
    report: CapReport | None = None
    for name, value, expected in CONFIGURATIONS:
        obs = _run_subprocess("probe", value, timeout, hide)
        if report is None:
            report = CapReport("cuda" if obs["native"] else "cpu-parity-stub")
        problems = _check_probe(name, value, expected, obs)
        report.outcomes.append(CapOutcome(name, value, not problems, obs, problems))
    obs = _run_subprocess("churn", str(CHURN_CAP), timeout, hide)
    problems = _check_churn(obs)
    report.outcomes.append(CapOutcome(f"churn: {CHURN_OPS} allocations under a {CHURN_CAP}-byte "
                                      "cap", str(CHURN_CAP), not problems, obs, problems))
    return report
