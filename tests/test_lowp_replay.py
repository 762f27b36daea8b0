"""Shrinking and replay of 16-bit kernels' failures (conformance/lowp/shrink.py, replay.py):
an accumulating case shrinks to what its failing element reads and fewer terms, still failing for
its reason; every counterexample of a run gets a replay file that `lowp --replay` reruns in the
kernel's process, exit 1 while it fails and 0 once the kernel is right; a kernel whose answer
depends on the call's size is replayed in the sweep's own call."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")
from conformance.lowp import accumulate, shrink   # noqa: E402
from conformance.lowp.formats import BFLOAT16   # noqa: E402
from fixtures.plugins import low_precision as fx   # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def accumulating(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("acc")
    proc = _cli("--plugin", "fixtures.plugins.low_precision:BUGGY_ACCUMULATING", "--seed", "3",
                "--evidence-dir", str(out))
    assert proc.returncode == 1 and proc.stdout.count("replay: torchlean-conformance lowp "
                                                      "--replay") == 3, proc.stdout
    return out


def test_a_bfloat16_accumulated_sum_shrinks_to_a_few_terms_of_one_row():
    kernel = next(k for k, _ in fx.BUGGY if k.name == "bf16_accumulated_sum")
    rng = np.random.default_rng(0)
    xs = [BFLOAT16.round(rng.standard_normal((4, 512)))]
    got = BFLOAT16.decode(kernel.call_bits(BFLOAT16.encode(xs[0])))
    reason, _, _ = accumulate.judge("sum", BFLOAT16, xs, got)
    at = tuple(np.argwhere(reason == "exceeds-bound")[0])
    small, small_at, tries = shrink.shrink(kernel, xs, at, "exceeds-bound")
    assert small[0].shape[0] == 1 and small[0].shape[1] <= 16 and small_at == (0,), small[0].shape
    assert tries <= shrink.TRIES
    got = BFLOAT16.decode(kernel.call_bits(BFLOAT16.encode(small[0])))
    assert accumulate.judge("sum", BFLOAT16, small, got)[0][small_at] == "exceeds-bound"


def test_every_counterexample_has_a_replay_that_still_fails(accumulating):
    files = sorted((accumulating / "replays").glob("*.json"))
    recs = [json.loads(p.read_text()) for p in accumulating.glob("lowp-*.json")]
    assert len(files) == sum(len(r["replays"]) for r in recs) >= 3
    for r in recs:
        for ex in r["counterexamples"]:
            assert "_inputs" not in ex and ex["replay"].startswith("replays/")
            assert np.prod(ex["shrunk_shapes"][0]) < np.prod(ex["shapes"][0]), ex
    for f in files:
        proc = _cli("--replay", str(f))
        assert proc.returncode == 1 and proc.stdout.startswith("still fails: "), proc.stdout
        doc = json.loads(f.read_text())
        assert doc["reason"] in proc.stdout and doc["reproduced"] is True


def test_a_replay_against_a_correct_kernel_passes_now(accumulating, tmp_path):
    doc = json.loads((accumulating / "replays" /
                      "lowp-bf16_accumulated_sum-exceeds-bound.json").read_text())
    doc.update(plugin="fixtures.plugins.low_precision:ALL", kernel="honest_bf16_sum")
    (tmp_path / "fixed.json").write_text(json.dumps(doc))
    proc = _cli("--replay", str(tmp_path / "fixed.json"))
    assert proc.returncode == 0 and proc.stdout.startswith("passes now: honest_bf16_sum"), \
        proc.stdout + proc.stderr


def test_a_size_dependent_kernel_is_replayed_in_the_sweeps_own_call(tmp_path):
    proc = _cli("--plugin", "fixtures.plugins.low_precision_binary:FAST", "--pair-stride",
                "4099", "--evidence-dir", str(tmp_path))
    assert proc.returncode == 1
    docs = {p.name: json.loads(p.read_text()) for p in (tmp_path / "replays").glob("*.json")}
    assert docs and all(d["reproduced"] for d in docs.values())
    for name, d in docs.items():
        again = _cli("--replay", str(tmp_path / "replays" / name))
        assert again.returncode == 1 and again.stdout.startswith("still fails"), again.stdout
        if d.get("alone_passes"):     # the row of b with every a, the element at a's pattern
            assert d["inputs"][0] == {"shape": [65536], "all_patterns": True}
            assert set(d["inputs"][1]) == {"shape", "fill"} and 0 <= d["element"][0] < 65536


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.update(format="something-else"), "is not a 16-bit replay file"),
    (lambda d: d.update(kind="ternary"), "malformed fields"),
    (lambda d: d.update(kernel="gone_kernel"), "no longer declares `gone_kernel`"),
])
def test_a_bad_replay_file_is_named(accumulating, tmp_path, edit, says):
    doc = json.loads((accumulating / "replays" /
                      "lowp-bf16_accumulated_sum-exceeds-bound.json").read_text())
    edit(doc)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    proc = _cli("--replay", str(tmp_path / "bad.json"))
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_lowp_without_plugin_or_replay_is_named():
    proc = _cli()
    assert proc.returncode == 2 and "--plugin MODULE:ATTR" in proc.stderr and "--replay" in \
        proc.stderr


def test_a_kernel_that_raises_while_shrinking_still_gets_its_failing_record(tmp_path):
    """The shrinker's smaller cases make this sum raise (it refuses a single row): the
    record says so (`shrink_error`) beside its verdict, and holds no arrays (the audit's cases
    were left in it: the harness crashed writing it)."""
    proc = _cli("--plugin", "fixtures.plugins.low_precision_hostile:SHRINK_REFUSING", "--seed",
                "3", "--evidence-dir", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the harness itself raised" not in proc.stderr, proc.stderr
    rec = json.loads((tmp_path / "lowp-shrink_refusing_f16_sum.json").read_text())
    assert rec["status"] == "failed" and len(rec["counterexamples"]) >= 2
    assert {"exceeds-bound", "signed-zero"} <= set(rec["failure_reasons"])
    assert "a single row" in rec["shrink_error"] and rec["replays"] == []
    assert all("_inputs" not in ex for ex in rec["counterexamples"])
