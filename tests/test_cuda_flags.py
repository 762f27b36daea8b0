"""The compile-flag matrix end to end on the GPU: native_cuda.exp rebuilt under --ftz=true passes
against the flush-to-zero policy its build declares and fails against the default build's
gradual underflow, with flushed subnormals as the reason (campaign, and the sampled sweep)."""
from __future__ import annotations

import json

import pytest

from conformance import cli, flag_matrix as fm

pytestmark = pytest.mark.cuda


def _matrix(tmp_path, *args) -> tuple[int, dict]:
    code = cli.main(["flags", "--capsule", "native_cuda.exp", "--evidence-dir", str(tmp_path),
                     "--quick", *args])
    return code, json.loads((tmp_path / fm.MATRIX_FILE).read_text())


def test_exp_default_and_ftz(tmp_path):
    code, m = _matrix(tmp_path, "--sets", "default,ftz")
    cells = m["rows"][0]["cells"]
    assert cells["default"][fm.OWN]["status"] == "passed"
    assert cells["ftz"][fm.OWN]["status"] == "passed"
    dp = cells["ftz"][fm.DEFAULT_POLICY]
    assert dp["status"] == "failed" and dp["reason"].startswith("flushed-subnormal"), dp
    assert dp["expect"] == fm.MUST_FAIL and dp["met"] is True
    assert code == 0 and m["counts"]["unmet"] == 0
    # the records name the options really compiled, the default-policy one included
    rec = json.loads((tmp_path / "ftz" / fm.DEFAULT_POLICY / "native_cuda.exp.json").read_text())
    assert "--ftz=true" in rec["environment"]["compile_options"]
    assert rec["capsule"]["numerical_policy"]["subnormals"] == "gradual-underflow"
    own = json.loads((tmp_path / "ftz" / fm.OWN / "native_cuda.exp.json").read_text())
    assert own["capsule"]["numerical_policy"]["subnormals"] == "flush-to-zero"
    assert own["fingerprint"]["value"] == rec["fingerprint"]["value"]   # one binary, two records
    default = json.loads((tmp_path / "default" / fm.OWN / "native_cuda.exp.json").read_text())
    assert default["fingerprint"]["value"] != own["fingerprint"]["value"]


def test_exp_ftz_sampled_sweep(tmp_path):
    code, m = _matrix(tmp_path, "--sets", "ftz", "--exhaustive", "--stride", "65537")
    cells = m["rows"][0]["cells"]["ftz"]
    assert cells[fm.OWN]["exhaustive"] == "passed"
    assert cells[fm.DEFAULT_POLICY]["exhaustive"] == "failed"
    sweep = json.loads((tmp_path / "ftz" / fm.DEFAULT_POLICY /
                        "exhaustive-native_cuda.exp.json").read_text())
    assert sweep["forward"]["reasons"].get("flushed-subnormal", 0) > 0, sweep["forward"]["reasons"]
    assert code == 0
