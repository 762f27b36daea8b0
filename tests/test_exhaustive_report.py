"""The report's "verified by exhaustion" page: from sweep records in an evidence directory, the
verdict lines (verified on the GPU named, a sampled sweep never), the table beside NVIDIA's
documented bounds, a link from the index, and sweep records never counted as unusable files."""
from __future__ import annotations

import json

from conformance import cli
from reports import render

ENV = {"gpu": "NVIDIA H200", "driver": 13000, "cuda_runtime": 13020}


def _report(tmp_path, capsys):
    ev = tmp_path / "ev"
    assert cli.main(["exhaustive", "--device", "cpu", "--stride", "1000003", "--evidence-dir",
                     str(ev), "--capsule", "reference.exp", "--capsule", "reference.sin"]) == 0
    # the same record as a passing exhaustive GPU sweep would write it (renamed capsule)
    rec = json.loads((ev / "exhaustive-reference.exp.json").read_text())
    rec.update(mode="exhaustive", stride=1, device="cuda", environment=dict(ENV))
    rec["capsule"] = dict(rec["capsule"], name="native_cuda.exp")
    rec["forward"] = dict(rec["forward"], max_ulps=1.5)
    (ev / "exhaustive-native_cuda.exp.json").write_text(json.dumps(rec))
    (ev / "exhaustive-broken.json").write_text("{\"format\": \"nope\"}")
    out = tmp_path / "out"
    code = render.main(["--evidence-dir", str(ev), "--out", str(out)])
    capsys.readouterr()
    return code, out


def test_page_shows_verdicts_and_nvidia_bounds(tmp_path, capsys):
    code, out = _report(tmp_path, capsys)
    assert code == 1          # exhaustive-broken.json is unusable; the sweep records are not
    page = (out / "exhaustive.html").read_text()
    assert "verified by exhaustion on NVIDIA H200, driver API 13.0, CUDA runtime 13.2" in page
    assert "sampled sweep (every 1000003-th bit pattern) on the CPU (NumPy), passed: a sample, " \
           "never verified" in page
    assert "<code>expf</code>" in page and "<code>sinf</code>" in page
    assert "exhaustive-broken.json: not an exhaustive sweep record" in page
    assert "ulp histogram: 0: " in page
    index = (out / "index.html").read_text()
    assert 'href="exhaustive.html"' in index and "Exhaustive sweeps" in index
    assert "exhaustive-broken.json" in index
    assert "exhaustive-reference.exp.json" not in index      # not an unusable evidence file


def test_no_sweep_records_no_page(tmp_path, capsys):
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "trust.json").write_text("{}")
    out = tmp_path / "out"
    render.main(["--evidence-dir", str(ev), "--out", str(out)])
    capsys.readouterr()
    assert not (out / "exhaustive.html").exists()


def test_cuda_versions_read_the_api_integers():
    from conformance.evidence import cuda_versions
    assert cuda_versions({"driver": 13000, "cuda_runtime": 12080}) == \
        "driver API 13.0, CUDA runtime 12.8"
    assert cuda_versions({}) == "driver API ?, CUDA runtime ?"
