"""Campaigns on Dask distributed (conformance/cluster/) on the CPU: a LocalCluster of two
worker processes produces the local runner's records (fingerprints, verdicts, cases, errors);
a Dask worker killed under a capsule leaves that capsule `crashed` and the others complete; an
unreachable scheduler is the named error."""
import os

import pytest

distributed = pytest.importorskip("distributed")

from conformance import cluster, evidence  # noqa: E402
from conformance.campaign import Settings  # noqa: E402
from conformance.runner import Target, run_targets  # noqa: E402

CAPSULES = ("reference.add", "reference.exp", "reference.softmax")
SAME = ("status", "fingerprint", "cases", "stats", "failure_reasons", "identity", "vjp_checked",
        "counterexamples", "error_model", "capsule")


WORKERS = 2


@pytest.fixture(scope="module")
def client():
    c = cluster.connect("local", WORKERS)
    yield c
    cluster.close(c)


@pytest.fixture(autouse=True)
def all_workers_up(request):
    """Each test that uses the cluster starts with its two workers up. A test that kills a worker
    leaves the worker's nanny to start another, which takes a moment; without this wait a test
    after it (in another order than the file's, or soon after it in the file's) would find one
    worker: one shard instead of two, one device key instead of two."""
    if "client" in request.fixturenames:
        request.getfixturevalue("client").wait_for_workers(WORKERS, timeout=120)


def _settings():
    return Settings.for_run(None, 0, True).to_json()


def test_a_local_cluster_writes_the_local_runners_records(client, tmp_path):
    targets = [Target(c) for c in CAPSULES]
    local = run_targets(targets, _settings(), tmp_path / "local", "cpu", 2, 300.0)
    dask = cluster.run_targets_on_cluster(client, targets, _settings(), tmp_path / "dask", "cpu",
                                          300.0)
    assert [r["status"] for r in dask] == ["passed"] * len(CAPSULES)
    for a, b in zip(local, dask):
        assert {k: a.get(k) for k in SAME} == {k: b.get(k) for k in SAME}, a["capsule"]["name"]
        assert b["ran_on"]["worker"] and b["ran_on"]["host"]
    for name in CAPSULES:   # written where the local runner writes, and readable as evidence
        rec = evidence.load_record(evidence.record_path(tmp_path / "dask", name))
        assert rec["status"] == "passed"
    again = cluster.run_targets_on_cluster(client, targets, _settings(), tmp_path / "dask",
                                           "cpu", 300.0)
    assert all(r.get("resumed") for r in again)


def test_a_worker_killed_mid_task_is_that_capsules_crash(client, tmp_path):
    targets = [Target("user.killing_abs", "fixtures.plugins.worker_killer:ENTRIES"),
               Target("reference.relu")]
    before = client.run(os.getpid)
    recs = cluster.run_targets_on_cluster(client, targets, _settings(), tmp_path, "cpu", 300.0)
    killed, other = recs
    # Its parent is its judge now (the kernel runs in a kernel process under the judge): the
    # judge dies, the Dask worker lives on, and the capsule is crashed for this run.
    assert killed["status"] == "crashed" and "status -9" in killed["message"], killed
    assert other["status"] == "passed"
    # The same worker processes: describing the plugin here (a kernel process of this process,
    # the workers' parent) killed none of them, nor multiprocessing's resource tracker, which a
    # worker's restart needs (reaper.kill_children).
    assert client.run(os.getpid) == before


def test_an_unreachable_scheduler_is_the_named_error():
    with pytest.raises(cluster.ClusterUnavailableError, match="no Dask scheduler answered"):
        cluster.connect("tcp://127.0.0.1:9", 1, timeout="2s")


def test_the_command_runs_on_a_local_cluster_and_names_a_missing_dask(tmp_path, capsys,
                                                                      monkeypatch):
    from conformance.cli import main
    out = tmp_path / "ev"
    assert main(["run", "--cluster", "local", "--jobs", "2", "--quick", "--no-progress",
                 "--suite", "campaign", "--capsule", "reference.sqrt", "--evidence-dir",
                 str(out)]) == 0
    assert evidence.load_record(evidence.record_path(out, "reference.sqrt"))["status"] == "passed"
    monkeypatch.setattr(cluster, "_distributed", lambda: (_ for _ in ()).throw(
        cluster.ClusterUnavailableError("--cluster needs Dask distributed")))
    assert main(["run", "--cluster", "local", "--quick", "--suite", "campaign", "--capsule",
                 "reference.sqrt", "--evidence-dir", str(out)]) == 2
    assert "--cluster needs Dask distributed" in capsys.readouterr().err


def test_every_worker_runs_each_capsule_on_each_device_and_keys_its_records(client, tmp_path):
    targets = [Target("reference.relu"), Target("reference.abs")]
    recs = cluster.run_targets_on_cluster(client, targets, _settings(), tmp_path, "cpu", 300.0,
                                          every_worker=True)
    assert [r["status"] for r in recs] == ["passed", "passed"]
    keys, rows = cluster.device_matrix(tmp_path)
    assert len(keys) == 2 and all(k.startswith("cpu-") for k in keys)   # two workers, two keys
    assert rows == {"reference.relu": dict.fromkeys(keys, "passed"),
                    "reference.abs": dict.fromkeys(keys, "passed")}
    table = cluster.format_matrix(tmp_path)
    assert "reference.relu" in table and "[1]" in table
    # The report's capsules x devices page shows both devices' verdicts.
    from conformance.cli import main
    assert main(["report", "--evidence-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "devices.html").read_text()
    assert all(k in page for k in keys) and page.count("st-passed") == 4
    assert "capsules x devices" in (tmp_path / "out" / "index.html").read_text()
    # The directory's own record is the least claiming of the devices' records.
    failed = dict(recs[0], status="failed")
    assert cluster._worse(recs[0], failed)["status"] == "failed"
    assert cluster._worse(failed, recs[0])["status"] == "failed"


def test_device_keys_name_the_gpu_or_the_cpu_worker():
    gpu = {"host": "vm", "gpu": "NVIDIA H200", "gpu_uuid": "30bcb6209a61e878", "worker": "x"}
    assert cluster.device_key(gpu) == "nvidia-h200-30bcb620-vm"
    assert cluster.device_key({"host": "vm", "worker": "tcp://127.0.0.1:4000"}) == \
        "cpu-vm-tcp-127-0-0-1-4000"
    # a named worker is keyed by its name: the next LocalCluster's worker 1 is the same column
    assert cluster.device_key({"host": "vm", "worker": "tcp://127.0.0.1:4000",
                               "worker_name": "1"}) == "cpu-vm-1"


def test_every_worker_needs_a_cluster(capsys):
    from conformance.cli import main
    assert main(["run", "--every-worker", "--quick", "--capsule", "reference.abs"]) == 2
    assert "--every-worker runs each capsule and suite on every worker" in capsys.readouterr().err
