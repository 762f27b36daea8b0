"""On a GPU machine: `--cluster local-cuda` (one Dask worker per visible GPU) shards a capsule's
sweep one per GPU and gives the local sweep's counts, histogram and verdict, each shard on its
own GPU; the guard suite run on every GPU's worker gives the local record; a CUDA campaign on
local-cuda writes the local runner's records. Needs Dask
distributed there (carried as wheels: dask, distributed and their dependencies)."""
import json

import pytest

distributed = pytest.importorskip("distributed")

from conformance import cli  # noqa: E402
from test_cluster import SAME  # noqa: E402
from test_cluster_sweeps import _same_sweep  # noqa: E402

pytestmark = pytest.mark.cuda

CAMPAIGN = ("native_cuda.add", "native_cuda.exp", "native_cuda.softmax", "native_cuda.layer_norm",
            "cublas.matmul")


def test_the_cuda_campaign_on_local_cuda_writes_the_local_runners_records(tmp_path):
    from conformance.campaign import Settings
    from conformance import cluster
    from conformance.runner import Target, run_targets
    settings = Settings.for_run(None, 0, True).to_json()
    targets = [Target(c) for c in CAMPAIGN]
    local = run_targets(targets, settings, tmp_path / "local", "cuda", 1, 600.0)
    client = cluster.connect("local-cuda", 1)
    try:
        dask = cluster.run_targets_on_cluster(client, targets, settings, tmp_path / "dask",
                                              "cuda", 600.0)
    finally:
        cluster.close(client)
    assert [r["status"] for r in dask] == ["passed"] * len(CAMPAIGN)
    for a, b in zip(local, dask):
        assert {k: a.get(k) for k in SAME} == {k: b.get(k) for k in SAME}, a["capsule"]["name"]
        assert b["ran_on"]["gpu_uuid"] and b["ran_on"]["gpu"]


def test_a_sweep_on_local_cuda_is_the_local_sweep_one_shard_per_gpu(tmp_path, capsys):
    from conformance.exhaustive.plan import gpu_count
    args = ["exhaustive", "--device", "cuda", "--stride", "65537", "--capsule",
            "native_cuda.exp", "--evidence-dir", str(tmp_path)]
    assert cli.main(args) == 0
    local = json.loads((tmp_path / "exhaustive-native_cuda.exp.json").read_text())
    assert cli.main([*args, "--cluster", "local-cuda"]) == 0
    rec = json.loads((tmp_path / "exhaustive-native_cuda.exp.json").read_text())
    _same_sweep(local, rec)
    gpus = gpu_count()
    info = rec["cluster"]
    assert rec["shards"] == gpus == len(info["shards"]) and info["lost"] == []
    uuids = {s["ran_on"]["gpu_uuid"] for s in info["shards"]}
    assert len(uuids) == gpus and all(s["ran_on"]["gpu"] for s in info["shards"])
    assert rec["environment"]["gpu"] == local["environment"]["gpu"]
    assert info["single_worker_seconds"] == (local["seconds"] if gpus == 1 else None)
    print(capsys.readouterr().out)   # the timing line, for the log


def test_the_guard_suite_on_every_gpu_is_the_local_record(tmp_path):
    from conformance.guards import run_guards
    assert cli.main(["run", "--device", "cuda", "--cluster", "local-cuda", "--every-worker",
                     "--suite", "guards", "--evidence-dir", str(tmp_path)]) == 0
    local = run_guards("cuda").to_record()
    per = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("gpus/*/suite-guards.json"))]
    assert len(per) == len({r["ran_on"]["gpu_uuid"] for r in per}) >= 1
    for r in per:
        assert {k: v for k, v in r.items() if k not in ("ran_on", "checkout")} == local
