"""The report's "capsules x GPUs" page (reports/gpus.py): two evidence directories, the fixture
H200 run and a copy of it relabelled as an H100 run, rendered side by side: one column per GPU
with its model, driver API and CUDA runtime from the records, each cell the earned trust linking
to the capsule page's section of that directory; verified by exhaustion counted for each GPU
from its own sweep; a directory whose records name several GPUs is flagged; one GPU directory
makes no page."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from reports import names
from reports.current import FixedBuild
from reports.render import main as report_main, render_report

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def _build() -> FixedBuild:
    """The fixtures' build, plus a registered cuda capsule no directory holds evidence of."""
    doc = json.loads((FIX / "current_build.json").read_text())
    exp = dict(next(r for r in doc["registered"] if r["name"] == "native_cuda.add"),
               name="native_cuda.exp", op="exp")
    return FixedBuild(doc["registered"] + [exp], doc["fingerprints"], doc.get("earned"))


def _edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _relabel(directory: Path, gpu: str, driver: int | None = None) -> None:
    """Every record and the trust export of `directory` say they ran on `gpu` (and `driver`)."""
    for path in directory.glob("*.json"):
        def fn(doc):
            for env in (doc.get("environment"),):
                if isinstance(env, dict) and env.get("gpu"):
                    env["gpu"] = gpu
                    if driver is not None:
                        env["driver"] = driver
        _edit(path, fn)


@pytest.fixture
def gpu_dirs(tmp_path) -> tuple[Path, Path]:
    h200 = Path(shutil.copytree(FIX / "h200", tmp_path / "h200"))
    h100 = Path(shutil.copytree(FIX / "h200", tmp_path / "h100"))
    _relabel(h100, H100)
    return h200, h100


def _sweep(directory: Path, capsule: str, gpu: str, mode="exhaustive", status="passed") -> None:
    """An exhaustive sweep record of what reports/gpus.py reads (conformance/exhaustive/
    writes the rest)."""
    (directory / f"exhaustive-{capsule}.json").write_text(json.dumps({
        "format": "torchlean-conformance-exhaustive", "capsule": {"name": capsule, "op": "add"},
        "mode": mode, "device": "cuda", "stride": 1, "status": status, "forward": {},
        "environment": {"gpu": gpu, "driver": 13000, "cuda_runtime": 13020}}))


def _earn_verified(directory: Path, capsule: str) -> None:
    """The directory's trust export says `capsule` earned verified (as export-trust writes it
    when the sweep ran on the exporting machine)."""
    _edit(directory / "trust.json",
          lambda doc: doc["capsules"][capsule].update(earned="verified", reason="verified"))


def _render(dirs, out: Path) -> Path:
    return render_report([str(d) for d in dirs], str(out), build=_build()).parent


def _columns(page: str) -> list[str]:
    return [re.sub(r"<[^>]+>", " ", h) for h in
            re.findall(r'<th scope="col" id="gpu-[^"]*">(.*?)</th>', page, re.S)]


def _cells(page: str, capsule: str) -> list[str]:
    """The cells of `capsule`'s row, as HTML."""
    # the name wraps only after its dots (macros.wrap): `native_cuda.<wbr>add`
    row = re.search(r'<tr><th scope="row"><a href="[^"]*"><code>' + re.escape(
        capsule.replace(".", ".<wbr>")) + r"</code></a></th>(.*?)</tr>", page, re.S)
    assert row, f"no row for {capsule}"
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)


def test_two_gpu_directories_make_a_matrix_with_each_gpus_model_driver_and_runtime(
        gpu_dirs, tmp_path):
    out = _render(gpu_dirs, tmp_path / "out")
    page = (out / names.GPUS_PAGE).read_text()
    h200_col, h100_col = _columns(page)
    for col, gpu, label in ((h200_col, H200, "h200"), (h100_col, H100, "h100")):
        assert gpu in col and "driver API 13.0, CUDA runtime 13.2" in col and label in col
        assert "2 fuzzed, 1 nothing" in col
    # each cell links to the capsule page's section of its own directory
    add = _cells(page, "native_cuda.add")
    assert [re.search(r'href="([^"]*)"', c).group(1) for c in add] == [
        f"{names.capsule_page('native_cuda.add')}#{names.evidence_anchor(d)}"
        for d in ("h200", "h100")]
    assert all(">fuzzed<" in c for c in add)
    scatter = _cells(page, "native_cuda.scatter_add")
    assert all("nothing" in c and "st-failed" in c for c in scatter)
    # the capsule page holds the anchors the cells link to
    capsule_page = (out / names.capsule_page("native_cuda.add")).read_text()
    assert 'id="evidence-h200"' in capsule_page and 'id="evidence-h100"' in capsule_page
    index = (out / names.INDEX_PAGE).read_text()
    assert f'href="{names.GPUS_PAGE}"' in index
    assert "NVIDIA H200 (h200): 0 verified by exhaustion on it" in index
    # cuda capsules that no GPU directory audits are named, not tabulated
    assert 'id="gpus-unaudited"' in page and "native_cuda.exp" in page.split("gpus-unaudited")[1]
    assert "native_cuda.exp</code></a></th>" not in page


def test_verified_by_exhaustion_counts_only_on_the_gpu_its_own_sweep_ran_on(gpu_dirs, tmp_path):
    h200, h100 = gpu_dirs
    for d in gpu_dirs:
        _earn_verified(d, "native_cuda.add")
    _sweep(h200, "native_cuda.add", H200)
    shutil.copy(h200 / "exhaustive-native_cuda.add.json", h100)   # the H200's sweep, copied
    page = (_render(gpu_dirs, tmp_path / "a") / names.GPUS_PAGE).read_text()
    on_h200, on_h100 = _cells(page, "native_cuda.add")
    assert ">verified<" in on_h200 and "not verified" not in on_h200
    assert ">checked<" in on_h100 and ">verified<" not in on_h100
    assert f"not verified on this GPU: its exhaustive sweep ran on {H200}" in on_h100
    h200_col, h100_col = _columns(page)
    assert "1 verified, 1 fuzzed, 1 nothing" in h200_col
    assert "1 checked, 1 fuzzed, 1 nothing" in h100_col
    # the H100's own sweep verifies it there
    _sweep(h100, "native_cuda.add", H100)
    page = (_render(gpu_dirs, tmp_path / "b") / names.GPUS_PAGE).read_text()
    assert all(">verified<" in c for c in _cells(page, "native_cuda.add"))
    index = (tmp_path / "b" / names.INDEX_PAGE).read_text()
    assert "NVIDIA H100 80GB HBM3 (h100): 1 verified by exhaustion on it" in index


@pytest.mark.parametrize("sweep, why", [
    (dict(mode="sampled"), "its sweep was sampled"),
    (dict(status="failed"), "its exhaustive sweep has status `failed`"),
    (None, "this directory holds no exhaustive sweep of it"),
])
def test_a_verified_claim_without_this_gpus_passed_exhaustive_sweep_shows_checked(
        gpu_dirs, tmp_path, sweep, why):
    h200, h100 = gpu_dirs
    _earn_verified(h100, "native_cuda.add")
    if sweep is not None:
        _sweep(h100, "native_cuda.add", H100, **sweep)
    page = (_render(gpu_dirs, tmp_path / "out") / names.GPUS_PAGE).read_text()
    on_h100 = _cells(page, "native_cuda.add")[1]
    assert ">checked<" in on_h100 and why in on_h100


def test_another_driver_is_another_column_and_a_mixed_directory_is_flagged(gpu_dirs, tmp_path):
    h200, h100 = gpu_dirs
    _relabel(h100, H200, driver=12080)
    _edit(h100 / "cublas.matmul.json", lambda d: d["environment"].update(gpu=H100))
    page = (_render(gpu_dirs, tmp_path / "out") / names.GPUS_PAGE).read_text()
    h200_col, other = _columns(page)
    assert "driver API 13.0" in h200_col and "its records also name" not in h200_col
    assert H200 in other and "driver API 12.8" in other
    assert f"its records also name {H100}, driver API 12.8, CUDA runtime 13.2" in other


def test_one_gpu_directory_makes_no_matrix_page(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    (out).mkdir()
    (out / names.GPUS_PAGE).write_text("left by an earlier report")
    assert report_main(["--evidence-dir", "fixtures/evidence/cpu", "fixtures/evidence/h200",
                        "--out", str(out)]) == 0
    assert not (out / names.GPUS_PAGE).exists()
    assert names.GPUS_PAGE not in (out / names.INDEX_PAGE).read_text()


def test_an_environment_value_of_the_wrong_type_makes_no_column_key():
    from reports.gpus import _gpu_env
    assert _gpu_env({"gpu": H200, "driver": 13000, "cuda_runtime": 13020}) == (H200, 13000, 13020)
    assert _gpu_env({"gpu": [H200], "driver": True, "cuda_runtime": "13.2"}) == (None,) * 3
    assert _gpu_env(["not", "a", "dict"]) == (None,) * 3
