"""The allocator-cap suite: fresh subprocesses per configuration, and checks that can fail."""
import pytest

from conformance import allocator_cap as ac


def test_suite_runs_every_configuration_in_subprocesses():
    report = ac.run_allocator_cap()
    assert len(report.outcomes) == len(ac.CONFIGURATIONS) + 1
    assert [(o.name, o.problems) for o in report.outcomes if not o.passed] == []
    record = report.to_record()
    assert record["held"] == record["configurations"] == 15 and record["passed"]
    if report.backend == "cpu-parity-stub":
        # never a green "15 of 15 held": the cap was not tested, and the record says so
        assert record["applicable"] is False and "not applicable" in record["note"]
        assert [o.name for o in report.outcomes[:-1]] == [f"parser: {n}" for n, _, _ in
                                                           ac.CONFIGURATIONS]
        released = report.outcomes[-1].observed["released"]
        assert released["cache_bytes"] == 0 and released["cache_cap_bytes"] == 0
    else:
        assert record["applicable"] is True


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


def _churn_obs(start_held=0, end_held=0, end_live=0, end_cache=0, max_cache=0, free_drop=0):
    """A native churn observation; mem_free is device-wide (other processes move it)."""
    stats = lambda live, cache, held, free: {  # noqa: E731
        "live_bytes": live, "cache_bytes": cache, "device_bytes": held, "mem_free": free}
    return {"native": True, "max_cache": max_cache, "largest_block": ac.CHURN_LARGEST,
            "start": stats(0, 0, start_held, 100 << 30),
            "end": stats(end_live, end_cache, end_held, (100 << 30) - free_drop)}


def test_churn_check_flags_a_leak_and_an_overfull_cache():
    leak = _churn_obs(end_live=512, end_held=512)
    assert any("a leak" in p for p in ac._check_churn(leak))
    full = _churn_obs(max_cache=ac.CHURN_CAP + 1, end_cache=4096, end_held=4096)
    assert any("over the cap" in p for p in ac._check_churn(full))
    ok = _churn_obs(max_cache=ac.CHURN_CAP, end_cache=ac.CHURN_CAP, end_held=ac.CHURN_CAP)
    assert ac._check_churn(ok) == []


def test_churn_ignores_device_memory_other_processes_take():
    # 579 MB less free device memory at the end (another test worker allocating on the GPU,
    # issue 10), while this process holds exactly its cached blocks: not a failure.
    busy = _churn_obs(max_cache=4096, end_cache=4096, end_held=4096, free_drop=579 << 20)
    assert ac._check_churn(busy) == []


def test_churn_flags_driver_bytes_this_process_never_gave_back():
    # Blocks freed from the cache's books but never cudaFree'd: held > live + cached.
    lost = _churn_obs(end_cache=4096, end_held=4096 + 3 * 262144)
    problems = ac._check_churn(lost)
    assert any("were never given back" in p and f"{3 * 262144} bytes" in p for p in problems)
    # Held bytes grown by more than the cap plus the largest block over the churn.
    live = 8 << 20
    grown = _churn_obs(start_held=live, end_live=live, end_cache=ac.CHURN_CAP,
                       end_held=live + ac.CHURN_CAP + ac.CHURN_LARGEST + 4)
    grown["start"]["live_bytes"] = live
    assert any("grew by" in p for p in ac._check_churn(grown))
    # The most a correct cache can hold at the end: every byte live or cached, cache at the cap.
    full = _churn_obs(start_held=live, end_live=live, end_cache=ac.CHURN_CAP,
                      end_held=live + ac.CHURN_CAP, max_cache=ac.CHURN_CAP)
    full["start"]["live_bytes"] = live
    assert ac._check_churn(full) == []


def test_churn_without_driver_accounting_is_a_named_problem():
    stale = _churn_obs()
    del stale["end"]["device_bytes"]
    assert any("no device_bytes" in p for p in ac._check_churn(stale))


@pytest.mark.cuda
def test_real_allocator_holds_every_configuration():
    report = ac.run_allocator_cap()
    assert report.backend == "cuda"
    assert [(o.name, o.problems) for o in report.outcomes if not o.passed] == []


def _recording_subprocess(monkeypatch, native: bool) -> list[dict]:
    """ac's subprocess.run replaced: each call's environment recorded, the probe answering as a
    machine with (native) or without a GPU would."""
    import json
    import subprocess
    envs = []
    stats = lambda live: {"live_bytes": live, "cache_bytes": 0, "cache_cap_bytes": 0}  # noqa: E731
    stub = {"native": False, "before": stats(0), "held": stats(ac.BLOCKS * ac.BLOCK_BYTES),
            "released": stats(0), "warnings": [], "cap_after_env_change": 0}

    def run(args, env, **kwargs):
        envs.append(env)
        hidden = env.get("CUDA_VISIBLE_DEVICES") == ""
        churn = "'churn'" in args[-1]
        obs = stub if hidden or not native else _churn_obs() if churn else _native_obs(0, 0)
        return subprocess.CompletedProcess(args, 0, json.dumps(obs) + "\n", "")
    monkeypatch.setattr(ac.subprocess, "run", run)
    return envs


def test_the_cpu_suite_on_a_gpu_machine_checks_the_cpu_path_not_the_cuda_cache(monkeypatch):
    """`run --device cpu` on a GPU machine (check.sh --cuda's CPU part) ran the CUDA
    configurations again and wrote them into the CPU evidence: its probes now see no GPU."""
    envs = _recording_subprocess(monkeypatch, native=True)
    report = ac.run_allocator_cap("cpu")
    assert report.backend == "cpu-parity-stub" and len(envs) == 1
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == ""
    envs.clear()
    report = ac.run_allocator_cap("cuda")
    assert report.backend == "cuda" and len(envs) == 1 + len(ac.CONFIGURATIONS) + 1   # + churn
    assert all(env.get("CUDA_VISIBLE_DEVICES") != "" for env in envs)


def test_the_suite_cli_passes_its_device_to_the_allocator_suite(monkeypatch):
    from conformance import suites
    seen = []
    monkeypatch.setattr(ac, "run_allocator_cap", lambda device=None: seen.append(device) or "r")
    assert suites.suite_report("allocator-cap", "cpu", True, None) == "r" and seen == ["cpu"]


@pytest.mark.cuda
def test_on_a_gpu_machine_the_cpu_suite_is_the_stubs():
    report = ac.run_allocator_cap("cpu")
    assert report.backend == "cpu-parity-stub"
    assert [(o.name, o.problems) for o in report.outcomes if not o.passed] == []
