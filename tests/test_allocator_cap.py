"""The allocator-cap suite: fresh subprocesses per configuration, and checks that can fail."""
import pytest

from conformance import allocator_cap as ac


def test_suite_runs_every_configuration_in_subprocesses():
    report = ac.run_allocator_cap()
    assert len(report.outcomes) == len(ac.CONFIGURATIONS) + 1
    assert [(o.name, o.problems) for o in report.outcomes if not o.passed] == []
    if report.backend == "cpu-parity-stub":
        released = report.outcomes[0].observed["released"]
        assert released["cache_bytes"] == 0 and released["cache_cap_bytes"] == 0
    record = report.to_record()
    assert record["held"] == record["configurations"] == 15 and record["passed"]


def _native_obs(cap, cached, warnings=(), live_after=0, cap_after=None):
    stats = lambda live, cache: {"live_bytes": live, "cache_bytes": cache,  # noqa: E731
                                 "cache_cap_bytes": cap}
    return {"native": True, "before": stats(0, 0),
            "held": stats(ac.BLOCKS * ac.BLOCK_BYTES, 0), "released": stats(live_after, cached),
            "cap_after_env_change": cap if cap_after is None else cap_after,
            "warnings": list(warnings)}


def test_checks_accept_a_correct_capped_cache():
    assert ac._check_probe("capped", "1048576", 1048576, _native_obs(1048576, 1048576)) == []
    assert ac._check_probe("control", "0", 0, _native_obs(0, 8 << 20)) == []
    warn = [f"{ac.CAP_VAR}='1MiB' is not a decimal byte count"]
    assert ac._check_probe("malformed", "1MiB", None, _native_obs(0, 8 << 20, warn)) == []


@pytest.mark.parametrize("obs, expected, problem", [
    (_native_obs(1048576, 1048576 + ac.BLOCK_BYTES), 1048576, "is above the cap"),
    (_native_obs(1048576, 0), 1048576, "holds no block"),
    (_native_obs(1048576, 1048576 - 2 * ac.BLOCK_BYTES), 1048576, "a block or more below"),
    (_native_obs(0, 4 << 20), 0, "unbounded cache holds"),
    (_native_obs(0, 8 << 20), None, "no warning naming"),
    (_native_obs(1048576, 1048576, cap_after=4096), 1048576, "cap changed within the process"),
    (_native_obs(1048576, 1048576, live_after=4), 1048576, "after release"),
    (_native_obs(5, 8 << 20), 0, "cap is 5, expected 0"),
])
def test_checks_flag_each_broken_behaviour(obs, expected, problem):
    problems = ac._check_probe("x", "v", expected, obs)
    assert any(problem in p for p in problems), problems


def test_churn_check_flags_a_leak_and_an_overfull_cache():
    start = {"live_bytes": 0, "mem_free": 100 << 20, "cache_bytes": 0}
    leak = {"native": True, "start": start, "max_cache": 0,
            "end": {"live_bytes": 512, "mem_free": 100 << 20, "cache_bytes": 0}}
    assert any("a leak" in p for p in ac._check_churn(leak))
    full = {"native": True, "start": start, "max_cache": ac.CHURN_CAP + 1, "cached_sizes": [4096],
            "end": {"live_bytes": 0, "mem_free": 90 << 20, "cache_bytes": 4096}}
    problems = ac._check_churn(full)
    assert any("over the cap" in p for p in problems)
    assert any("below its start" in p for p in problems)
    # Two granules held by one small cached block, and one more: within the allowance.
    ok = dict(full, max_cache=4096, end={"live_bytes": 0, "mem_free": (100 << 20) - (6 << 20),
                                          "cache_bytes": 4096})
    assert ac._check_churn(ok) == []


@pytest.mark.cuda
def test_real_allocator_holds_every_configuration():
    report = ac.run_allocator_cap()
    assert report.backend == "cuda"
    assert [(o.name, o.problems) for o in report.outcomes if not o.passed] == []
