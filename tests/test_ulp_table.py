"""The ulp table (conformance/ulp_table/, issue 39), on the CPU: the new references (rsqrt, erf,
gelu_erf) against plain mpmath at high precision and their float64 formulas' certificate and
stated bounds against them; the exhaustive driver judging a capsule whose op is no op of ours,
on the host and on the flushing device path; the table from strided sweeps of stand-ins (a
planted 3-ulp error reads 3, a correctly rounded one 0), its n/a cells (no op, no library, a
plugin that refuses to load, peers on cpu), its JSON and text, `--from-records`, the report's
section, and the command's usage errors."""
from __future__ import annotations

import json
from pathlib import Path
import re

import mpmath
import numpy as np
import pytest

from conformance import cli, exhaustive, rounding
from conformance.exhaustive.refs import D, FUNCTIONS, LIB, evaluate
from conformance.references import get as get_reference

STANDINS = "fixtures.plugins.ulp_standins"
STRIDE = 1048583              # 4084 patterns: a sample, every STRIDE-th


# --- the references ------------------------------------------------------------------------------

def _bits(values) -> np.ndarray:
    return np.array(values, np.float32).view(np.uint32)


EDGES = {
    "rsqrt": [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-45, 1e-45, 1.0, 4.0, 0.25, 2.0,
              3.4028235e38, 1.1754942e-38, 1.1754944e-38],
    "erf": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 0.5, -0.5, 1.0, 3.9,
            -3.92, 5.9999995, 6.0, -6.0, 100.0],
    "gelu_erf": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e-45, -3e-45, 1e-39,
                 -1.1754942e-38, 2.0 ** -30, -(2.0 ** -30), -0.999, -1.0, -1.0001, -3.0, -5.0,
                 -8.0, -12.5, -13.5, -14.0, -14.5, -20.0, -37.5, -39.999996, -40.0, 8.499999,
                 8.5, 1e30],
}


def _sample(name, count):
    rng = np.random.default_rng(39)
    drawn = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    near = {"rsqrt": (0.5, 4.0), "erf": (-7.0, 7.0), "gelu_erf": (-42.0, 10.0)}[name]
    dense = rng.uniform(*near, count // 2).astype(np.float32).view(np.uint32)
    return np.concatenate([_bits(EDGES[name]), drawn, dense]).view(np.float32)


_CACHE: dict = {}


def _case(name):
    """(inputs, the reference's Reference) of a function, computed once per process."""
    if name not in _CACHE:
        x = _sample(name, {"rsqrt": 1200, "erf": 500, "gelu_erf": 300}[name])
        with np.errstate(invalid="ignore"):     # signalling NaNs among the drawn patterns
            _CACHE[name] = (x, get_reference(name).forward((x,)))
    return _CACHE[name]


def _exact(name, x: float):
    """The function by mpmath's own (non-interval) functions at 700 bits: another road."""
    if np.isnan(x):
        return None
    if name == "rsqrt":
        if x < 0 or (x == 0 and np.signbit(x)) or x == -np.inf:
            return {True: -np.inf, False: np.nan}[x == 0] if x == 0 or x < 0 else np.nan
        return 0.0 if x == np.inf else (np.inf if x == 0 else 1 / mpmath.sqrt(mpmath.mpf(x)))
    if np.isinf(x):
        return {"erf": np.copysign(1.0, x), "gelu_erf": x if x > 0 else -0.0}[name]
    if x == 0:
        return x
    a = mpmath.mpf(float(x))
    if name == "erf":
        return mpmath.erf(a)
    return a / 2 * mpmath.erfc(-a / mpmath.sqrt(2))


@pytest.mark.parametrize("name", ["rsqrt", "erf", "gelu_erf"])
def test_references_agree_with_mpmath_at_700_bits(name):
    x, ref = _case(name)
    bad = []
    with mpmath.workprec(700):
        for xi, got in zip(x, ref.value):
            want = _exact(name, float(xi))
            if want is None:
                ok = np.isnan(got)
            elif isinstance(want, float):
                ok = np.float32(want).view(np.uint32) == np.float32(got).view(np.uint32) or \
                    (np.isnan(want) and np.isnan(got))
            else:
                w = rounding.round_mpf_to_f32(want, negative_zero=bool(np.signbit(xi)))
                ok = np.float32(w).view(np.uint32) == np.float32(got).view(np.uint32)
            if not ok:
                bad.append((float(xi), float(got), want))
    assert not bad, bad[:5]
    # every input off the routed special values went through the Ziv loop itself
    with np.errstate(invalid="ignore"):
        ziv = {"rsqrt": (x > 0) & (x < np.inf), "erf": (np.abs(x) < 6) & (x != 0),
               "gelu_erf": (x > -40) & (x < 8.5) & (x != 0)}[name]
    assert ref.slow_elements == int(ziv.sum()) > 0.3 * x.size


def test_special_values_of_the_new_references():
    def one(name, v):
        return float(get_reference(name).forward((np.array([v], np.float32),)).value[0])
    assert one("rsqrt", 0.0) == np.inf and one("rsqrt", -0.0) == -np.inf
    assert one("rsqrt", np.inf) == 0.0 and np.isnan(one("rsqrt", -2.0))
    assert np.isnan(one("rsqrt", -np.inf))
    assert one("erf", np.inf) == 1.0 and one("erf", -np.inf) == -1.0
    assert np.signbit(one("erf", -0.0)) and one("erf", 6.0) == 1.0
    ninf = one("gelu_erf", -np.inf)
    assert ninf == 0.0 and np.signbit(ninf) and one("gelu_erf", np.inf) == np.inf
    assert np.signbit(one("gelu_erf", -0.0)) and np.signbit(one("gelu_erf", -50.0))
    # a subnormal x of an odd count of ulps: x/2 is a float32 midpoint, the exact value lies
    # above it (towards +inf): 5 ulps -> 3 and -7 -> -3, where ties to even give 2 and -4
    tiny = float(np.float32(2.0 ** -149))
    assert one("gelu_erf", 5 * tiny) == 3 * tiny and one("gelu_erf", -7 * tiny) == -3 * tiny


@pytest.mark.parametrize("name", ["rsqrt", "erf", "gelu_erf"])
def test_float64_formulas_certify_what_the_references_say_within_their_bounds(name):
    """The exhaustive sweep's float64 formula of each function decides nearly every input, as
    the reference does, and its value lies within its stated bound wherever the exact value is
    a normal float64 (what the sweep's bound audit checks on the inputs mpmath decides)."""
    x, ref = _case(name)
    fin = np.isfinite(x) & (x != 0)
    x, want, exact = x[fin], ref.value[fin], ref.exact[fin]
    formula = FUNCTIONS[name].forward
    v32, _, decided = evaluate(np, formula, x)
    same = (v32.view(np.uint32) == want.view(np.uint32)) | (np.isnan(v32) & np.isnan(want))
    assert decided.mean() > 0.99 and same[decided].all(), x[decided & ~same][:5]
    with np.errstate(all="ignore"):       # the formula's own value (no analytic rule's)
        v64, bound = formula.evaluate(np, x.astype(np.float64))
        bound = np.broadcast_to(bound, x.shape)
        live = np.isfinite(exact) & (np.abs(exact) >= 2.0 ** -1000)
        ratio = np.abs(v64[live] - exact[live]) / (bound[live] * np.abs(exact[live]))
    assert live.sum() > 0.3 * x.size and ratio.max() <= 1.0
    assert 2 * D < np.min(bound) and (name != "erf" or np.all(bound == LIB))


# --- the driver on a function that is no op of ours ---------------------------------------------

def _standin(name):
    from conformance.plugins import plugin_handlers
    return plugin_handlers(f"{STANDINS}:HONEST")[name]


@pytest.mark.parametrize("name", ["honest.erf", "honest.gelu_erf"])
def test_device_path_of_a_function_without_an_op_matches_the_host(name):
    """The sweep's device path, on the stand-in that flushes as CuPy's kernels do, gives the
    host path's counts for a UserOp capsule (its reference found by label, forward only)."""
    import ftz_numpy
    cap, handler = _standin(name)
    host = exhaustive.sweep_capsule(cap, handler, "cpu", 262147)
    dev = exhaustive.sweep_capsule(cap, ftz_numpy.device_handler(handler), "cpu", 262147,
                                   xp=ftz_numpy.FtzNumPy())
    assert host["status"] == dev["status"] == "passed" and host["vjp"] is None
    assert host["capsule"]["op"] == name.split(".")[1]
    for key in ("elements", "failed", "ulp_histogram", "max_ulps", "not_correctly_rounded",
                "subnormal_inputs", "subnormal_results", "signed_zero_mismatch"):
        assert host["forward"][key] == dev["forward"][key], key
    assert dev["reference"]["forward"]["judge_cross_check"]["disagreed"] == 0
    assert dev["reference"]["forward"]["spot_check"]["checked"] > 0
    assert dev["reference"]["forward"]["spot_check"]["disagreed"] == 0


def test_a_formula_whose_bound_is_false_is_a_harness_error(monkeypatch):
    """erf 2^-26 off while claiming one float64 rounding: the certificate decides wrong values
    and the sweep's checks against mpmath say so; never a verdict on the kernel."""
    import dataclasses
    from conformance.exhaustive import refs
    cap, handler = _standin("honest.erf")
    lying = dataclasses.replace(refs.FUNCTIONS["erf"].forward, evaluate=lambda xp, x: (
        refs._special(xp, "erf")(x) * (1 + 2.0 ** -26), D))
    monkeypatch.setitem(refs.FUNCTIONS, "erf", refs.OpRef(lying, None))
    rec = exhaustive.sweep_capsule(cap, handler, "cpu", 262147)
    assert rec["status"] == "harness-error"
    assert re.match(r"the certified reference disagrees with mpmath at input 0x|the float64 "
                    r"reference broke its stated bound", rec["message"]), rec["message"]


# --- the table -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    """One strided run: ours (sqrt among the four functions), the honest and planted stand-ins
    and a column whose plugin refuses to load."""
    d = tmp_path_factory.mktemp("ulp")
    args = ["ulp-table", "--device", "cpu", "--stride", str(STRIDE), "--evidence-dir", str(d),
            "--plugin", f"honest={STANDINS}:HONEST", "--plugin", f"planted={STANDINS}:PLANTED",
            "--plugin", f"torch={STANDINS}:MISSING"]
    for f in ("sqrt", "rsqrt", "erf", "gelu_erf"):
        args += ["--function", f]
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(args)
    return d, code, out.getvalue()


def _cells(d):
    doc = json.loads((d / "ulp-table.json").read_text())
    return doc, {r["function"]: r for r in doc["rows"]}


def test_planted_reads_3_and_honest_0(table_dir):
    d, code, _ = table_dir
    assert code == 0
    doc, rows = _cells(d)
    for f in ("sqrt", "rsqrt", "erf", "gelu_erf"):
        planted, honest = rows[f]["cells"]["planted"], rows[f]["cells"]["honest"]
        assert planted["max_ulps"] == 3.0 and planted["status"] == "failed", f
        assert planted["not_correctly_rounded"] > 0.4 * planted["inputs"]
        assert honest["max_ulps"] == 0.0 and honest["status"] == "passed", f
        assert honest["not_correctly_rounded"] == 0 and honest["nan_mismatch"] == 0
        assert honest["inputs"] == planted["inputs"] == 4084
    at = rows["sqrt"]["cells"]["planted"]["max_ulps_input"]
    assert re.fullmatch(r"0x[0-9a-f]{8}", at)


def test_na_cells_say_why(table_dir):
    d, _, _ = table_dir
    doc, rows = _cells(d)
    assert rows["rsqrt"]["cells"]["ours"] == {"na": "no op of ours (the engine has no rsqrt op)"}
    assert rows["erf"]["cells"]["cupy"]["na"] == "CuPy's kernels are swept on cuda only " \
                                                 "(--device cuda)"
    assert rows["rsqrt"]["cells"]["cupy"]["na"].startswith("no CuPy function")
    assert "libnothing is not importable" in rows["sqrt"]["cells"]["torch"]["na"]
    assert rows["gelu_erf"]["nvidia"]["na"].startswith("no CUDA function")
    assert rows["erf"]["nvidia"] == {"function": "erff", "documented_ulps": 2,
                                     "source": rows["erf"]["nvidia"]["source"]}
    assert rows["sqrt"]["cells"]["ours"]["capsule"] == "reference.sqrt"


def test_table_json_and_text(table_dir):
    d, _, out = table_dir
    doc, rows = _cells(d)
    assert doc["format"] == "torchlean-conformance-ulp-table" and doc["version"] == 1
    assert doc["mode"] == "sampled" and doc["stride"] == STRIDE and doc["source"] == "swept"
    assert doc["coverage"] == f"sample, every {STRIDE}-th bit pattern (never exhaustive)"
    assert [c["name"] for c in doc["columns"]] == ["ours", "torch", "cupy", "jax", "honest",
                                                   "planted"]
    assert [r["function"] for r in doc["rows"]] == ["gelu_erf", "sqrt", "rsqrt", "erf"]
    cell = rows["erf"]["cells"]["planted"]
    for key in ("max_ulps_input_value", "flushed_subnormal_results", "flushed_subnormal_inputs",
                "inf_mismatch", "seconds", "documented", "within_documented", "record"):
        assert key in cell, key
    assert (d / cell["record"]).is_file()
    lines = out.splitlines()
    lines = lines[next(i for i, ln in enumerate(lines) if ln.startswith("ulp table on")):]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("function"))
    assert lines[head].split() == ["function", "ours", "PyTorch", "CuPy", "JAX", "honest",
                                   "planted", "NVIDIA"]
    assert lines[head + 2].split() == ["sqrt", "0", "n/a", "n/a", "n/a", "0", "3", "0",
                                       "(sqrtf)"]
    assert lines[0] == f"ulp table on the CPU (NumPy): sample, every {STRIDE}-th bit pattern " \
                       "(never exhaustive)"
    assert "n/a, no op of ours (the engine has no erf op): ours (erf)" in lines


def test_a_sweep_stopped_by_a_finding_shows_the_finding_not_a_maximum():
    from conformance.ulp_table import table
    rec = {"capsule": {"name": "x.erf", "op": "erf"}, "status": "failed", "stride": 1,
           "patterns": {"checked": 4278190086}, "seconds": 0.1,
           "forward": {"elements": 0, "failed": 1, "reasons": {"raised": 1}, "max_ulps": 0.0}}
    c = table.cell(rec, "exhaustive-x.erf.json")
    assert table.cell_text(c) == "raised" and c["within_documented"] is None
    rec["forward"] = {"elements": 4278190086, "max_ulps": 2.5, "failed": 0}
    rec["capsule"]["contracts"] = {"value": {"declared_bound": {"ulps": 2.0, "reason": "erff"}}}
    c = table.cell(rec, "exhaustive-x.erf.json")
    assert c["within_documented"] is True and table.cell_text(c) == "2.5"
    rec["forward"].update(max_ulps=3.0, inputs_flushed=4, nan_mismatch=1)
    assert table.cell_text(table.cell(rec, "f")) == "3 !*f"


def test_from_records_rebuilds_the_same_cells(table_dir, tmp_path, capsys):
    import shutil
    d = tmp_path / "copy"
    shutil.copytree(table_dir[0], d)
    _, before = _cells(d)
    before = {f: {k: {x: y for x, y in c.items() if x != "seconds"} for k, c in r["cells"].items()}
              for f, r in before.items()}
    assert cli.main(["ulp-table", "--from-records", "--evidence-dir", str(d),
                     "--plugin", f"honest={STANDINS}:HONEST",
                     "--plugin", f"planted={STANDINS}:PLANTED"] +
                    [a for f in ("sqrt", "rsqrt", "erf", "gelu_erf") for a in ("--function", f)]
                    ) == 0
    capsys.readouterr()
    doc, after = _cells(d)
    assert doc["source"] == "records" and doc["stride"] == STRIDE
    for f, row in after.items():
        for k in ("ours", "honest", "planted"):
            got = {x: y for x, y in row["cells"][k].items() if x != "seconds"}
            assert got == before[f][k], (f, k)
    assert cli.main(["ulp-table", "--from-records", "--evidence-dir", str(d), "--stride", "7",
                     "--function", "sqrt"]) == 0
    capsys.readouterr()
    _, rows = _cells(d)
    assert "is of stride 1048583, not 7" in rows["sqrt"]["cells"]["ours"]["na"]


def test_a_missing_library_is_an_na_cell_not_a_crash(tmp_path, capsys):
    from conformance.ulp_table import BY_NAME, Column, default_columns
    from conformance.ulp_table import cli as ulp_cli
    cols = default_columns("cuda")
    assert {c.name: c.needs for c in cols} == {"ours": (), "torch": ("torch", "cupy"),
                                              "cupy": ("cupy",), "jax": ("jax", "cupy")}
    ghost = Column("ghost", "Ghost", "ghost", "nowhere:ENTRIES", ("no_such_library_39",))
    assert ulp_cli._missing(ghost) == "no_such_library_39 is not installed here (no " \
                                      "`no_such_library_39` module to import)"
    code = ulp_cli._table("cpu", STRIDE, [ghost], ["ghost"], [BY_NAME["erf"]], tmp_path,
                          sweep=True)
    capsys.readouterr()
    doc = json.loads((tmp_path / "ulp-table.json").read_text())
    assert code == 0 and doc["rows"][0]["cells"]["ghost"]["na"] == ulp_cli._missing(ghost)


def test_a_column_whose_process_dies_keeps_what_it_swept_and_exits_3(tmp_path, capsys):
    from conformance.ulp_table import BY_NAME, Column
    from conformance.ulp_table import cli as ulp_cli
    dying = Column("dying", "dying", "dying", f"{STANDINS}:DYING")
    code = ulp_cli._table("cpu", STRIDE, [dying], ["dying"], [BY_NAME["sqrt"], BY_NAME["erf"]],
                          tmp_path, sweep=True)
    capsys.readouterr()
    rows = {r["function"]: r for r in json.loads((tmp_path / "ulp-table.json").read_text())[
        "rows"]}
    assert code == 3 and rows["sqrt"]["cells"]["dying"]["max_ulps"] == 0.0
    assert rows["erf"]["cells"]["dying"]["na"].startswith(
        "its column's sweep process ended (exit 9) before sweeping it")


@pytest.mark.parametrize("module", ["unary_torch", "unary_jax", "unary_cupy"])
def test_the_peers_plugins_name_what_is_missing(module):
    import importlib
    from conformance.plugins import PluginError
    peer = importlib.import_module(f"conformance.peers.{module}")
    lib = {"unary_torch": "torch", "unary_jax": "jax", "unary_cupy": "cupy"}[module]
    if importlib.util.find_spec(lib) is not None:
        pytest.skip(f"{lib} is installed here")
    with pytest.raises(PluginError, match=f"{lib}.* not importable"):
        peer.ENTRIES()


def test_the_peers_cover_the_table_and_say_what_they_lack():
    from unittest import mock
    from conformance.peers import unary_cupy, unary_jax, unary_torch
    from conformance.ulp_table import FUNCTIONS as ROWS, default_columns
    names = [f.name for f in ROWS]
    assert list(unary_torch.functions(mock.MagicMock())) == names
    assert list(unary_jax.functions(mock.MagicMock())) == names
    cupy = next(c for c in default_columns("cuda") if c.name == "cupy")
    assert sorted(set(unary_cupy.FUNCTIONS) | set(cupy.lacks)) == sorted(names)
    assert not set(unary_cupy.FUNCTIONS) & set(cupy.lacks)


def test_the_report_shows_the_table(table_dir, tmp_path, capsys):
    from reports import render
    d, _, _ = table_dir
    out = tmp_path / "out"
    render.main(["--evidence-dir", str(d), "--out", str(out)])
    capsys.readouterr()
    page = (out / "exhaustive.html").read_text()
    assert "The ulp table" in page and "<th>planted</th>" in page
    row = page.split('<th scope="row" title="1 / sqrt x">rsqrt</th>')[1].split("</tr>")[0]
    cells = re.findall(r">([^<]*)</td>", row)
    assert cells == ["n/a", "n/a", "n/a", "n/a", "0", "3", "2 (rsqrtf)"]
    assert "n/a, no op of ours (the engine has no rsqrt op): ours rsqrt" in page
    assert "ulp-table.json" not in (out / "index.html").read_text()


# --- usage errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, said", [
    (["--stride", "0"], "--stride 0: expected a whole number"),
    (["--implementation", "numpy"], "--implementation numpy: expected one of ours, torch"),
    (["--function", "cbrt"], "--function cbrt: expected one of exp, log"),
    (["--plugin", "torch"], "--plugin torch: expected NAME=MODULE:ATTR"),
    (["--plugin", "ours=a:b"], "--plugin ours=a:b: expected NAME=MODULE:ATTR"),
    (["--device", "tpu"], "--device tpu: expected cuda or cpu"),
    (["--from-records", "--evidence-dir", "/nonexistent/ulp"], "--from-records: "
     "/nonexistent/ulp is no directory"),
])
def test_usage_errors_are_one_line_and_exit_2(args, said, tmp_path, capsys):
    if "--evidence-dir" not in args:
        args = args + ["--evidence-dir", str(tmp_path / "ev")]
    assert cli.main(["ulp-table", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"torchlean-conformance: {said}"), err
    assert not (tmp_path / "ev").exists()


def test_cuda_without_a_gpu_is_a_usage_error(tmp_path, capsys):
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("a GPU is visible here")
    assert cli.main(["ulp-table", "--device", "cuda", "--evidence-dir", str(tmp_path)]) == 2
    assert "--device cuda: no usable GPU" in capsys.readouterr().err


def test_the_recorded_h100_table_puts_each_variant_under_its_own_column():
    """evidence/h100/ulp-table.json (all 2^32 inputs of the four implementations on an H100): a
    variant row (`.accurate`, ours only) is labelled whole and its figure stands under ours."""
    from conformance.ulp_table.table import FIRST, text
    doc = json.loads((Path(__file__).resolve().parents[1] / "evidence" / "h100" /
                      "ulp-table.json").read_text())
    lines = text(doc).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("sigmoid "))
    assert lines[at + 1] == "  .accurate".ljust(FIRST) + "1"
    assert lines[at].split() == ["sigmoid", "1", "3", "f", "3", "f", "4", "f", "n/a"]
