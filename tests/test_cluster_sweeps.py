"""The reliability suites and the exhaustive sweep on Dask distributed, on the CPU: a LocalCluster
of two worker processes gives the local suites' records, and the local sampled sweep's counts,
histogram and verdict with two shards and their timing; a worker killed under a shard leaves the
record `incomplete` with the lost shard named, never a verdict; one killed under a suite is the
named SuiteTaskError."""
import json

import pytest

distributed = pytest.importorskip("distributed")

from conformance import exhaustive  # noqa: E402
from conformance.cluster import exhaustive as exhaustive_cluster  # noqa: E402
from conformance.cli import main  # noqa: E402
from conformance.cluster.suites import SuiteTaskError, run_suite_on_cluster  # noqa: E402
from conformance.suites import suite_report  # noqa: E402
from conformance.worker import resolve  # noqa: E402
# the module's two-worker LocalCluster, and each test's wait for both workers to be up
from test_cluster import all_workers_up, client  # noqa: E402,F401

STRIDE = 1000003
TALLY = ("elements", "failed", "reasons", "ulp_histogram", "max_ulps", "not_correctly_rounded",
         "nan_mismatch", "inf_mismatch", "signed_zero_mismatch", "subnormal_inputs",
         "subnormal_results", "counterexamples")
KILLER = "fixtures.plugins.worker_killer"


def _same_sweep(a: dict, b: dict) -> None:
    assert (a["status"], a["mode"], a["stride"], a["patterns"], a["chunks"]) == \
        (b["status"], b["mode"], b["stride"], b["patterns"], b["chunks"])
    for side in ("forward", "vjp"):
        assert {k: a[side][k] for k in TALLY} == {k: b[side][k] for k in TALLY}, side
        ra, rb = a["reference"][side], b["reference"][side]
        assert (ra["to_mpmath"], ra["spot_check"], ra["bound_audit"]) == \
            (rb["to_mpmath"], rb["spot_check"], rb["bound_audit"]), side
    assert a["fingerprint"] == b["fingerprint"]


@pytest.mark.parametrize("name", ["reference.exp", "reference.gelu"])
def test_a_sharded_sweep_on_two_workers_is_the_local_sampled_sweep(client, name):  # noqa: F811
    cap, handler = resolve(name, None)
    local = exhaustive.sweep_capsule(cap, handler, "cpu", STRIDE)
    rec = exhaustive_cluster.sweep_on_cluster(client, cap, handler, None, "cpu", STRIDE)
    assert local["status"] == "passed" and local["shards"] == 1
    _same_sweep(local, rec)
    info = rec["cluster"]
    assert rec["shards"] == 2 and len(info["workers"]) == 2 and info["lost"] == []
    assert [s["shard"] for s in info["shards"]] == [0, 1]
    assert {s["worker"] for s in info["shards"]} == set(info["workers"])   # one shard each
    assert sum(s["patterns"] for s in info["shards"]) == rec["patterns"]["checked"]
    assert all(s["seconds"] > 0 for s in info["shards"]) and info["wall_seconds"] > 0
    busy = sum(s["seconds"] for s in info["shards"])
    # times are kept to the microsecond, ratios to four significant digits
    assert info["speedup"] == pytest.approx(busy / info["wall_seconds"], rel=1e-3)
    assert rec["seconds"] == pytest.approx(info["wall_seconds"], abs=5e-4)


def test_the_command_shards_over_a_local_cluster_and_quotes_the_single_worker_time(
        tmp_path, capsys):
    args = ["exhaustive", "--device", "cpu", "--stride", str(STRIDE), "--capsule",
            "reference.exp", "--evidence-dir", str(tmp_path)]
    assert main(args) == 0
    local = json.loads((tmp_path / "exhaustive-reference.exp.json").read_text())
    assert main([*args, "--cluster", "local", "--jobs", "2"]) == 0
    rec = json.loads((tmp_path / "exhaustive-reference.exp.json").read_text())
    _same_sweep(local, rec)
    info = rec["cluster"]
    assert rec["shards"] == 2 and info["single_worker_seconds"] == local["seconds"]
    assert info["speedup_vs_single_worker"] == pytest.approx(
        local["seconds"] / info["wall_seconds"], rel=1e-3)
    out = capsys.readouterr().out
    assert "2 worker(s), shard seconds" in out and "against one worker's" in out


def test_the_single_worker_time_comes_only_from_the_same_sweep():
    rec = {"fingerprint": {"f": 1}, "stride": 7, "device": "cuda", "mode": "sampled",
           "environment": {"gpu": "NVIDIA H200"}}
    one = {**rec, "status": "passed", "shards": 1, "seconds": 40.0}
    assert exhaustive_cluster.single_worker_seconds(one, rec) == 40.0
    carried = {**one, "shards": 2, "seconds": 21.0, "cluster": {"single_worker_seconds": 40.0}}
    assert exhaustive_cluster.single_worker_seconds(carried, rec) == 40.0
    assert exhaustive_cluster.single_worker_seconds({**one, "shards": 2}, rec) is None
    assert exhaustive_cluster.single_worker_seconds({**one, "stride": 1}, rec) is None
    assert exhaustive_cluster.single_worker_seconds({**one, "fingerprint": {}}, rec) is None
    assert exhaustive_cluster.single_worker_seconds({**one, "status": "failed"}, rec) is None
    other_gpu = {**one, "environment": {"gpu": "NVIDIA H100"}}
    assert exhaustive_cluster.single_worker_seconds(other_gpu, rec) is None
    assert exhaustive_cluster.single_worker_seconds(None, rec) is None


def test_shards_on_different_gpus_are_no_verdict():
    h200 = {"gpu": "NVIDIA H200", "driver": "580", "cuda_runtime": "13000"}
    assert exhaustive_cluster.incomplete_reason(2, [], [h200, dict(h200)]) is None
    why = exhaustive_cluster.incomplete_reason(2, [], [h200, {**h200, "gpu": "NVIDIA H100"}])
    assert "2 different GPU environments" in why and "NVIDIA H100" in why


def test_a_task_pinned_to_a_worker_that_left_ends_instead_of_waiting(client):  # noqa: F811
    from conformance import cluster
    gone = "tcp://127.0.0.1:1"   # no worker there: the pinned task would wait for it forever
    f = client.submit(sum, [1, 2], workers=[gone], allow_other_workers=False, pure=False)
    g = client.submit(sum, [3, 4], pure=False)
    lost, seven = cluster.gather_pinned(client, [f, g], [gone, None], poll_s=0.2)
    assert seven == 7 and isinstance(lost, cluster.WorkerGoneError)
    assert f"worker {gone} left the cluster before running its task" in str(lost)


def test_jobs_without_a_cluster_is_a_user_error(tmp_path, capsys):
    assert main(["exhaustive", "--device", "cpu", "--jobs", "2", "--capsule", "reference.exp",
                 "--evidence-dir", str(tmp_path)]) == 2
    assert "--jobs 2: expected a whole number of at least 1, together with --cluster local" in \
        capsys.readouterr().err


def test_exhaustive_names_a_missing_dask(tmp_path, capsys, monkeypatch):
    from conformance import cluster
    monkeypatch.setattr(cluster, "_distributed", lambda: (_ for _ in ()).throw(
        cluster.ClusterUnavailableError("--cluster needs Dask distributed")))
    assert main(["exhaustive", "--device", "cpu", "--cluster", "local", "--capsule",
                 "reference.exp", "--evidence-dir", str(tmp_path)]) == 2
    assert "--cluster needs Dask distributed" in capsys.readouterr().err


def test_a_suite_task_lost_is_reported_as_not_run_with_exit_3(tmp_path, capsys, monkeypatch):
    from conformance import cluster
    from conformance.cluster import suites as cluster_suites

    def lost(client, run, name, *args):
        raise SuiteTaskError(f"suite `{name}` did not complete on tcp://w: KilledWorker")
    monkeypatch.setattr(cluster, "connect", lambda spec, jobs: object())
    monkeypatch.setattr(cluster, "close", lambda client: None)
    monkeypatch.setattr(cluster_suites, "run_suite_on_cluster", lost)
    assert main(["run", "--cluster", "local", "--suite", "guards", "--evidence-dir",
                 str(tmp_path)]) == 3
    assert "suite `guards` did not complete on tcp://w" in capsys.readouterr().err
    assert not (tmp_path / "suite-guards.json").exists()


def test_suites_on_the_cluster_give_the_local_records(client):  # noqa: F811
    for name in ("guards", "allocator-cap"):
        local = suite_report(name, "cpu", True).to_record()
        ran = run_suite_on_cluster(client, suite_report, name, "cpu", True, every_worker=True)
        assert len(ran) == 2 and len({r[1]["worker"] for r in ran}) == 2
        for report, ran_on in ran:
            assert report.to_record() == local and local["passed"], name
            assert ran_on["host"] and ran_on["worker"]


def test_run_suite_on_the_cluster_writes_each_devices_record(tmp_path, capsys):
    assert main(["run", "--cluster", "local", "--jobs", "2", "--every-worker", "--suite",
                 "guards", "--evidence-dir", str(tmp_path)]) == 0
    own = json.loads((tmp_path / "suite-guards.json").read_text())
    per = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("gpus/*/suite-guards.json"))]
    assert len(per) == 2 and own["passed"] and own["ran_on"]["worker"]
    strip = lambda r: {k: v for k, v in r.items() if k != "ran_on"}  # noqa: E731
    assert all(strip(r) == strip(own) for r in per)
    assert own["tried"] == own["rejected"] >= 100
    assert "guards: 2 device(s)" in capsys.readouterr().out
    assert main(["report", "--evidence-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0


# The two tests below kill a worker of the module's cluster (its nanny starts another; the next
# test waits for it: all_workers_up).

def test_a_worker_killed_under_a_shard_leaves_the_record_incomplete(client):  # noqa: F811
    cap, handler = resolve("user.exiting_abs", f"{KILLER}:SHARD_ENTRIES")
    rec = exhaustive_cluster.sweep_on_cluster(client, cap, handler, f"{KILLER}:SHARD_ENTRIES",
                                              "cpu", 65537)
    assert rec["status"] == "incomplete", rec["message"]
    assert rec["message"].startswith("shard 1 of 2 lost on worker tcp://")
    assert "KilledWorker" in rec["message"] and "needs every pattern" in rec["message"]
    lost = rec["cluster"]["lost"]
    assert [x["shard"] for x in lost] == [1] and lost[0]["patterns"] == 32640
    assert rec["patterns"]["unjudged"] == 32640
    assert [s["shard"] for s in rec["cluster"]["shards"]] == [0]
    assert rec["forward"]["elements"] == rec["patterns"]["checked"] - 32640


def test_a_worker_killed_under_a_suite_is_the_named_error(client):  # noqa: F811
    from fixtures.plugins.worker_killer import exiting_suite
    with pytest.raises(SuiteTaskError, match=r"suite `guards` did not complete on "
                                             r"its Dask worker: KilledWorker"):
        run_suite_on_cluster(client, exiting_suite, "guards", "cpu", True, every_worker=False)
