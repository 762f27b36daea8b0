"""Campaigns on Dask distributed (conformance/cluster.py) on the CPU: a LocalCluster of two
worker processes produces the local runner's records (fingerprints, verdicts, cases, errors);
a Dask worker killed under a capsule leaves that capsule `crashed` and the others complete; an
unreachable scheduler is the named error."""
import pytest

distributed = pytest.importorskip("distributed")

from conformance import cluster, evidence  # noqa: E402
from conformance.campaign import Settings  # noqa: E402
from conformance.runner import Target, run_targets  # noqa: E402

CAPSULES = ("reference.add", "reference.exp", "reference.softmax")
SAME = ("status", "fingerprint", "cases", "stats", "failure_reasons", "identity", "vjp_checked",
        "counterexamples", "error_model", "capsule")


@pytest.fixture(scope="module")
def client():
    c = cluster.connect("local", 2)
    yield c
    cluster.close(c)


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
    recs = cluster.run_targets_on_cluster(client, targets, _settings(), tmp_path, "cpu", 300.0)
    killed, other = recs
    assert killed["status"] == "crashed" and "Dask task ended" in killed["message"], killed
    assert other["status"] == "passed"


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
