"""The VJP sweeps of binary 16-bit kernels (conformance/lowp/binary_vjp.py): the references follow
docs/OPS.md's rules (checked against rational arithmetic here), the passes cover what they claim,
honest VJPs pass, buggy ones fail for their reason, a hostile one never passes, through the
kernel process as a user runs it, with replays; trust never calls a sample `verified`."""
from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from conformance.lowp import binary, binary_vjp, formats, trust
from conformance.lowp.formats import BFLOAT16, FLOAT16
from conformance.lowp.kernel import triple_inputs

pytest.importorskip("ml_dtypes")
from fixtures.plugins import low_precision_binary_vjp as fx   # noqa: E402  (needs ml_dtypes)
from test_lowp_binary import _round_exact                     # noqa: E402  (rational rounding)

REPO = Path(__file__).resolve().parent.parent
ROWS = binary.select_rows(16411)      # 4 rows of every 16411th pattern and the 24 special ones


def _rule(op: str, fmt, a: float, b: float, g: float) -> tuple[float, float]:
    """docs/OPS.md's VJP of op at (a, b) for the cotangent g, in rationals where it rounds."""
    if op == "add":
        return g, g
    if op == "sub":
        return g, -g
    if op == "mul":
        def times(x, y):
            if not (np.isfinite(x) and np.isfinite(y)):
                with np.errstate(invalid="ignore"):             # IEEE's inf and NaN
                    return float(np.float64(x) * np.float64(y))
            return _round_exact(fmt, Fraction(x) * Fraction(y)) if x * y != 0 else x * y
        return times(g, b), times(g, a)
    if np.isnan(a) or np.isnan(b):
        return (g if np.isnan(a) else 0.0), (g if np.isnan(b) else 0.0)
    if a == b:
        half = _round_exact(fmt, Fraction(g) / 2) if np.isfinite(g) and g != 0 else g / 2
        return half, half
    a_wins = a > b if op == "max" else a < b
    return (g, 0.0) if a_wins else (0.0, g)


def _same(x: float, y: float) -> bool:
    return (np.isnan(x) and np.isnan(y)) or (x == y and np.signbit(x) == np.signbit(y))


@pytest.mark.parametrize("fmt", [BFLOAT16, FLOAT16], ids=lambda f: f.name)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_the_references_follow_the_rules_of_ops_md(fmt, op):
    rng = np.random.default_rng(11)
    special = np.array(formats.SPECIALS, dtype=np.uint16)
    bits = [np.concatenate([np.repeat(special, 24), rng.integers(0, 1 << 16, 3000)])
            .astype(np.uint16) for _ in range(3)]
    bits[1][:576] = np.tile(special, 24)
    bits[1][576:1000] = bits[0][576:1000]                       # ties, in every sign and class
    a, b, g = (fmt.decode(x) for x in bits)
    refs, _ = binary_vjp.vjp_reference(op, fmt, a, b, g)
    for i in range(a.size):
        want = _rule(op, fmt, float(a[i]), float(b[i]), float(g[i]))
        assert _same(refs[0][i], want[0]) and _same(refs[1][i], want[1]), \
            (op, a[i], b[i], g[i], refs[0][i], refs[1][i], want)


def test_half_of_the_least_subnormal_cotangent_rounds_to_even():
    tiny = BFLOAT16.min_subnormal
    g = np.array([tiny, 3 * tiny, -tiny])
    (ga, gb), _ = binary_vjp.vjp_reference("max", BFLOAT16, np.zeros(3), np.zeros(3), g)
    assert ga.tolist() == gb.tolist() == [0.0, 2 * tiny, -0.0] and np.signbit(ga[2])


def test_triple_inputs_give_each_role_its_patterns():
    p = binary_vjp.Pass("t", ("every", "shuffled", "row"), "selected", ())
    rows = np.array([5, 0xffff], dtype=np.uint16)
    mults, adds = binary_vjp.row_inputs(p, rows, FLOAT16, np.random.default_rng(0))
    a, b, g = triple_inputs(mults, adds)
    every = np.arange(1 << 16)
    for r in range(2):
        part = slice(r << 16, (r + 1) << 16)
        assert np.array_equal(a[part], every)
        assert np.array_equal(np.sort(b[part]), every) and not np.array_equal(b[part], every)
        assert set(g[part].tolist()) == {int(rows[r])}
    m2, a2 = binary_vjp.row_inputs(binary_vjp.Pass("o", ("drawn", "one", "row"), "selected", ()),
                                   rows, BFLOAT16, np.random.default_rng(0))
    _, one, _ = triple_inputs(m2, a2)
    assert set(one.tolist()) == {0x3f80}


def test_triple_inputs_are_the_rule_modulo_2_16_even_where_the_product_passes_2_31():
    # the rule in Python integers, against the uint32-product/uint16-sum arithmetic that builds
    # a shard (its products reach 65535 * 65535 > 2^31, where an int would overflow)
    mults = np.array([[65535, 1, 0], [40000, 65535, 3], [2, 65533, 65535]], dtype=np.uint16)
    adds = np.array([[65535, 0, 7], [1, 65535, 65000], [0, 12345, 65535]], dtype=np.uint16)
    made = triple_inputs(mults, adds)
    for i in range(3):
        for r in range(3):
            want = [(int(mults[i, r]) * x + int(adds[i, r])) % 65536 for x in range(1 << 16)]
            assert made[i][r << 16:(r + 1) << 16].tolist() == want, (i, r)


def test_a_pass_is_complete_only_over_what_it_covers():
    add, = binary_vjp.PASSES["add"]
    mul_ga, _ = binary_vjp.PASSES["mul"]
    ones, drawn = binary_vjp.PASSES["max"]
    assert binary_vjp.complete(add, 24 << 16) and not binary_vjp.complete(add, 1000)
    assert binary_vjp.complete(mul_ga, 1 << 32) and not binary_vjp.complete(mul_ga, 90 << 16)
    assert binary_vjp.complete(ones, 1 << 32) and not binary_vjp.complete(drawn, 1 << 32)


@pytest.mark.parametrize("kernel", [k for k in fx.HONEST if k.fmt is BFLOAT16 or
                                    k.op not in ("add", "sub")], ids=lambda k: k.name)
def test_honest_vjps_pass(kernel):
    rec = binary_vjp.sweep_vjp(kernel, "cpu", ROWS, seed=3)
    assert rec["failure_reasons"] == {} and rec["counterexamples"] == [], rec["counterexamples"]
    assert rec["not_correctly_rounded"] == 0 and rec["max_ulps_passing"] <= 0.5
    names = [p["name"] for p in rec["passes"]]
    assert names == [p.name for p in binary_vjp.PASSES[kernel.op]]
    # every g for add and sub, whatever the rows; a sample of pairs otherwise
    assert rec["exhaustive"] is (kernel.op in ("add", "sub"))


@pytest.mark.parametrize("kernel, reason", fx.BUGGY, ids=lambda k: getattr(k, "name", ""))
def test_buggy_vjps_fail_for_their_reason(kernel, reason):
    rec = binary_vjp.sweep_vjp(kernel, "cpu", ROWS, seed=3)
    assert rec["failure_reasons"].get(reason, 0) > 0, rec["failure_reasons"]
    ex = next(c for c in rec["counterexamples"] if c["reason"] == reason)
    bits = [np.array([int(x, 16)], np.uint16) for x in ex["input"].split(", ")]
    out = kernel.call_bits(*bits, part="vjp")[("ga", "gb").index(ex["output"]), 0]
    assert f"0x{int(out):04x}" == ex["got"] != ex["expected"]      # the kernel's own answer
    row = ex["row"]     # the row as the sweep made it holds the inputs at the element
    made = triple_inputs(np.array(row["mults"])[:, None], np.array(row["adds"])[:, None])
    assert [int(x[ex["element"]]) for x in made] == [int(b[0]) for b in bits]


def test_a_tie_bug_fails_at_the_ties_and_nowhere_else():
    rec = binary_vjp.sweep_vjp(fx.BUGGY[1][0], "cpu", ROWS, seed=3)
    b = BFLOAT16.decode(ROWS)
    ties = sum(0 if np.isnan(x) else 2 if x == 0 else 1 for x in b)     # at g = 1, each row
    sample_rows = binary.select_rows(binary_vjp.SAMPLE_STRIDE).size
    # both gradients wrong at every tie of g = 1; at most two ties a row where g is drawn
    assert 2 * ties <= rec["failed"] <= 2 * ties + 4 * sample_rows, rec["failed"]
    for c in rec["counterexamples"]:
        a, b, _ = c["input_value"]
        assert a == b, c


def _lowp(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--evidence-dir",
                           str(out), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def through_the_cli(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vjp")
    proc = _lowp(out, "--plugin", "fixtures.plugins.low_precision_binary_vjp:CLI",
                 "--pair-stride", "16411", "--seed", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 with VJP inputs or contract certification drawn from run seed 3" in proc.stdout
    return out


def _rec(out: Path, name: str) -> dict:
    return json.loads((out / f"lowp-{name}.json").read_text())


def test_the_cli_sweeps_the_vjp_through_the_kernel_process_as_in_process(through_the_cli):
    k = fx.CLI[1]
    got, want = _rec(through_the_cli, k.name)["vjp"], binary_vjp.sweep_vjp(k, "cpu", ROWS, 3)
    for ex in got["counterexamples"]:
        assert ex.pop("replay").startswith("replays/")
    for key in ("failure_reasons", "counterexamples", "passes", "exhaustive",
                "not_correctly_rounded", "max_ulps_passing"):
        assert json.dumps(got[key]) == json.dumps(want[key]), (k.name, key)
    assert _rec(through_the_cli, fx.CLI[0].name)["vjp"]["failure_reasons"] == {}
    swapped = _rec(through_the_cli, fx.CLI[1].name)
    assert swapped["status"] == "failed" and swapped["failure_reasons"] == \
        {**swapped["vjp"]["failure_reasons"]}      # its forward passes: the VJP's reasons only


def test_a_vjp_returning_one_array_never_passes(through_the_cli):
    rec = _rec(through_the_cli, "one_array_f16_mul_vjp")
    assert rec["status"] == "failed" and rec["failure_reasons"] == {"raised": 1}, rec
    assert "VJP" in rec["message"] and "expected float16[2, " in rec["message"], rec["message"]


def test_every_vjp_counterexample_replays_and_still_fails(through_the_cli):
    files = sorted((through_the_cli / "replays").glob("*.json"))
    docs = [json.loads(f.read_text()) for f in files]
    assert len(files) == len(_rec(through_the_cli, fx.CLI[1].name)["counterexamples"]) > 1
    assert all(d["kind"] == "binary-vjp" and d["reproduced"] is True for d in docs)
    for f, doc in list(zip(files, docs))[::len(files) - 1]:     # the first and the last again
        proc = subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--replay",
                               str(f)], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and proc.stdout.startswith("still fails: "), proc.stdout
        assert doc["reason"] in proc.stdout


def _earned(out: Path, tmp: Path, name: str, edit) -> dict:
    rec = _rec(out, name)
    edit(rec)
    (tmp / f"lowp-{name}.json").write_text(json.dumps(rec))
    return trust.export_lowp_trust(tmp, trust.machine_environment())["kernels"][name]


def _all_pairs(rec: dict) -> None:
    rec.update(pairs=1 << 32, exhaustive=True)
    for p in rec["vjp"]["passes"]:
        if p["name"] != "every g":
            p["evaluations"] = 1 << 32


def test_trust_takes_the_weaker_of_forward_and_vjp_and_never_verifies_a_sample(
        through_the_cli, tmp_path):
    mul = fx.CLI[0].name
    got = _earned(through_the_cli, tmp_path, mul, lambda r: None)
    assert got["earned"] == "fuzzed" and "a sample of its VJP's" in got["reason"], got
    got = _earned(through_the_cli, tmp_path, mul, lambda r: r.update(pairs=1 << 32,
                                                                        exhaustive=True))
    assert got["earned"] == "fuzzed", got       # all pairs forward, a sample of (g, b), (g, a)
    got = _earned(through_the_cli, tmp_path, mul, _all_pairs)
    assert got["earned"] == "verified" and "every value it depends on" in got["reason"], got
    got = _earned(through_the_cli, tmp_path, mul, lambda r: (_all_pairs(r),
                                                             r["vjp"]["passes"].pop()))
    assert got["earned"] is None and "lacks the pass(es) gb over (g, a)" in got["reason"], got
    got = _earned(through_the_cli, tmp_path, mul, lambda r: (
        _all_pairs(r), r["vjp"].update(not_correctly_rounded=3)))
    assert got["earned"] is None and "3 VJP results are not correctly rounded" in got["reason"]
    top = fx.CLI[2].name          # max: its g is drawn, a sample however many pairs
    got = _earned(through_the_cli, tmp_path, top, _all_pairs)
    assert got["earned"] == "fuzzed", got


def test_the_report_names_the_vjp_passes(through_the_cli):
    from reports.lowp import _view
    view = _view(_rec(through_the_cli, fx.CLI[0].name))
    assert "; VJP: ga over (g, b) " in view.judged and "(a sample)" in view.judged
