"""The ulp table on the GPU, sampled (--stride) to stay fast: every implementation installed here
is swept in its own process (ours, PyTorch's, CuPy's, JAX's), each cell of an installed library
holds a finished sweep of its capsule, and the cells of a library that is not installed say so."""
from __future__ import annotations

import importlib.util
import json

import pytest

from conformance import cli
from conformance.ulp_table import FUNCTIONS

pytestmark = pytest.mark.cuda

STRIDE = "4194319"            # about 1024 patterns: the plumbing, not the figures


def test_every_installed_implementation_fills_its_cells(tmp_path, capsys):
    code = cli.main(["ulp-table", "--device", "cuda", "--stride", STRIDE, "--evidence-dir",
                     str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    doc = json.loads((tmp_path / "ulp-table.json").read_text())
    assert doc["device"] == "cuda" and doc["environment"]["gpu"]
    needs = {"ours": (), "torch": ("torch",), "cupy": (), "jax": ("jax",)}
    for row in doc["rows"]:
        f = next(f for f in FUNCTIONS if f.name == row["function"])
        for col, mods in needs.items():
            cell = row["cells"][col]
            lacks = (col == "ours" and not f.ours) or (col == "cupy" and f.name in (
                "softplus", "gelu_tanh", "gelu_erf", "rsqrt"))
            if lacks:
                assert "na" in cell and "no " in cell["na"], (row["function"], col, cell)
            elif any(importlib.util.find_spec(m) is None for m in mods):
                assert "not installed" in cell["na"], (row["function"], col, cell)
            else:
                assert cell.get("status") in ("passed", "failed"), (row["function"], col, cell)
                assert cell["stride"] == int(STRIDE) and cell["inputs"] > 1000
    ours = {r["function"]: r["cells"]["ours"] for r in doc["rows"]}
    assert ours["sqrt"]["max_ulps"] == 0 and ours["exp"]["max_ulps"] <= 2
    assert "variants" in next(r for r in doc["rows"] if r["function"] == "gelu_tanh")
