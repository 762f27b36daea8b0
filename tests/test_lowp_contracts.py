"""A plugin's own binary 16-bit ops, judged against the contract it gives (conformance/lowp/
contracts.py, `lowp --op-contracts`): the certification refuses a reference that is not what it
declares, the rounding of a declared error decides near midpoints in mpmath, honest kernels pass
and a buggy one fails, through the kernel process, with replays; trust says the reference was the
plugin's (`verified-against-contract`, never `verified`)."""
from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from conformance.lowp import binary, contracts, refs, trust
from conformance.lowp.contracts import BinaryContract, LoadedContract, ReferenceRefusedError
from conformance.lowp.formats import BFLOAT16, FLOAT16

pytest.importorskip("ml_dtypes")
from fixtures.plugins import low_precision_div as fx              # noqa: E402
from fixtures.plugins import low_precision_div_contract as cx     # noqa: E402
from test_lowp_binary import _round_exact                         # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPEC = "fixtures.plugins.low_precision_div_contract:CONTRACTS"
ROWS = binary.select_rows(4099)


def _loaded(c: BinaryContract) -> LoadedContract:
    return LoadedContract(c, "tests:inline", "0" * 64)


@pytest.fixture
def small_certification(monkeypatch):
    """A tenth of the certification's pairs: where its size is not what a test is about."""
    monkeypatch.setattr(contracts, "RANDOM_PAIRS", 2000)
    monkeypatch.setattr(contracts, "SCREENED", 1 << 17)
    monkeypatch.setattr(contracts, "_CERTIFIED", {})


def _quotients(fmt):
    """Random pairs, and pairs whose quotient is exact: on a midpoint of the format's subnormal
    range, where a second rounding could go either way."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 1 << 16, 6000).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 6000).astype(np.uint16)
    b[:3000] = fmt.encode(np.ldexp(1.0, rng.integers(1, 16, 3000)))     # powers of two
    return fmt.decode(a), fmt.decode(b)


@pytest.mark.parametrize("fmt", [BFLOAT16, FLOAT16], ids=lambda f: f.name)
def test_the_division_reference_is_the_exact_quotient_correctly_rounded(fmt):
    a, b = _quotients(fmt)
    ref, _, decided = contracts.reference(_loaded(cx.DIV), fmt, a, b)
    assert decided == 0            # one rounding: no pair needs mpmath
    for x, y, r in zip(a, b, ref):
        if np.isfinite(x) and np.isfinite(y) and y != 0 and x != 0:
            assert r == _round_exact(fmt, Fraction(float(x)) / Fraction(float(y))), (x, y, r)


def _nudged(declared):
    """Division whose float64 value is nudged up by 2^-52 relative: within 5 units of 2^-53 of
    the exact quotient (the quotient's rounding, the nudge and its rounding: 4 and a little)."""
    return BinaryContract("div", lambda a, b: (a / b) * (1 + 2.0 ** -52), lambda a, b: a / b,
                          declared)


def test_a_declared_error_is_decided_by_mpmath_near_midpoints():
    a, b = _quotients(BFLOAT16)
    ref, y, decided = contracts.reference(_loaded(_nudged(5.0)), BFLOAT16, a, b)
    plain = BFLOAT16.round(y)
    wrong_plainly = 0
    for x1, x2, r, p in zip(a, b, ref, plain):
        if np.isfinite(x1) and np.isfinite(x2) and x1 != 0 and x2 != 0:
            want = _round_exact(BFLOAT16, Fraction(float(x1)) / Fraction(float(x2)))
            assert r == want, (x1, x2, r, want)
            wrong_plainly += p != want
    # the nudge moves exact midpoints off them: rounding the float64 value alone misrounds
    assert wrong_plainly > 0 and decided >= wrong_plainly


def test_an_exact_value_a_hair_past_a_midpoint_is_decided_at_more_precision():
    """a / 2 + a^2, at bfloat16 subnormals a = n 2^-133: float64's a / 2 is a midpoint for odd
    n, and the exact value exceeds it by 2^-133 relative, far below mpmath's first 120 bits
    (gelu of a subnormal is such a value)."""
    hair = BinaryContract("half_and_a_hair", lambda a, b: a / 2,
                          lambda a, b: a / 2 + a * a, 1.0)
    tiny = BFLOAT16.min_subnormal
    a = np.array([1, 3, 5, 4]) * tiny
    ref, _, decided = contracts.reference(_loaded(hair), BFLOAT16, a, np.zeros(4))
    assert (ref / tiny).tolist() == [1, 2, 3, 2] and decided == 3


def test_the_midpoint_below_a_power_of_two_is_a_quarter_ulp_away():
    mid = 1.0 - 2.0 ** -12          # float16's midpoint between 1 - 2^-11 and 1
    y = np.array([mid + 2.0 ** -40, 1.0 - 2.0 ** -13])      # both round to 1
    near = refs.near_midpoint(FLOAT16, y, np.array([2.0 ** -30, 2.0 ** -30]))
    assert near.tolist() == [True, False]
    half_least = FLOAT16.min_subnormal / 2            # between 0 and the least subnormal
    near = refs.near_midpoint(FLOAT16, np.array([half_least * (1 - 2.0 ** -45)]),
                                   np.array([half_least * 2.0 ** -40]))
    assert near.tolist() == [True]


def test_the_certification_refuses_a_reference_that_is_not_what_it_declares(
        small_certification):
    with pytest.raises(ReferenceRefusedError) as info:
        contracts.certify(_loaded(cx.FLOAT32_DIV), FLOAT16, seed=1)
    says = str(info.value)
    assert "op `div` (tests:inline) is refused in float16" in says
    assert "not within its declared float64 error (one-rounding)" in says
    assert "is refused in float16: at a = 0x" in says and "reference64 gives " in says
    with pytest.raises(ReferenceRefusedError, match="not within its declared float64 error"):
        contracts.certify(_loaded(_nudged("one-rounding")), BFLOAT16, seed=1)
    cert = contracts.certify(_loaded(_nudged(5.0)), BFLOAT16, seed=1)
    assert cert["pairs"] == 24 * 24 + 2000 + cert["midpoint_pairs"] and cert["midpoint_pairs"] > 0


def test_the_certification_refuses_a_reference_whose_mpmath_side_is_missing(
        small_certification):
    silent = BinaryContract("div", lambda a, b: a / b, lambda a, b: None, "one-rounding")
    with pytest.raises(ReferenceRefusedError, match="reference_mp gives no finite number"):
        contracts.certify(_loaded(silent), BFLOAT16, seed=1)


@pytest.mark.parametrize("kernel", fx.HONEST + fx.HYPOT, ids=lambda k: k.name)
def test_honest_kernels_pass_against_the_contract(kernel, small_certification):
    loaded = _loaded(cx.DIV if kernel.op == "div" else cx.HYPOT)
    rec = binary.sweep_pairs(kernel, "cpu", ROWS, op_contract=loaded, seed=1)
    assert rec["status"] == "passed" and rec["failure_reasons"] == {}, rec["counterexamples"]
    assert rec["reference"]["by"] == "contract" and rec["reference"]["certification"]["pairs"]
    if kernel.op == "hypot":      # a declared error: some pairs decided by mpmath
        assert rec["reference"]["decided_by_mpmath"] > 0 and rec["max_ulps_passing"] <= 1.0


def test_a_reciprocal_division_fails_not_correctly_rounded(small_certification):
    kernel, reason = fx.BUGGY[0]
    rec = binary.sweep_pairs(kernel, "cpu", ROWS, op_contract=_loaded(cx.DIV), seed=1)
    assert rec["status"] == "failed" and rec["failure_reasons"].get(reason, 0) > 0, rec
    ex = next(c for c in rec["counterexamples"] if c["reason"] == reason)
    a, b = ex["input_value"]
    assert BFLOAT16.decode(np.array([int(ex["expected"], 16)]))[0] == \
        _round_exact(BFLOAT16, Fraction(a) / Fraction(b)) != ex["got_value"]


def _lowp(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--evidence-dir",
                           str(out), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def through_the_cli(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("div")
    proc = _lowp(out, "--plugin", "fixtures.plugins.low_precision_div:ALL", "--op-contracts",
                 SPEC, "--pair-stride", "4099", "--seed", "5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 16-bit kernel(s): 3 over 2555904 pairs (a sample), judged on cpu" in proc.stdout
    return out


def _rec(out: Path, name: str) -> dict:
    return json.loads((out / f"lowp-{name}.json").read_text())


def test_the_cli_judges_against_the_contract_in_the_judge(through_the_cli):
    honest, buggy = _rec(through_the_cli, "honest_bf16_div"), _rec(through_the_cli,
                                                                   "reciprocal_bf16_div")
    assert honest["status"] == "passed" and buggy["status"] == "failed"
    ref = honest["reference"]
    assert ref["contract"] == SPEC and ref["float64_error"] == "one-rounding"
    assert ref["contract_source"] == trust.source_digest(SPEC)
    cert = ref["certification"]
    assert cert["seed"] == 5 and cert["random_pairs"] == 20000 and cert["special_pairs"] == 576
    assert cert["pairs"] == 20576 + cert["midpoint_pairs"]


def test_an_own_op_earns_trust_against_the_contract_never_ours(through_the_cli, tmp_path):
    def earned(edit) -> dict:
        rec = _rec(through_the_cli, "honest_f16_div")
        edit(rec)
        (tmp_path / "lowp-honest_f16_div.json").write_text(json.dumps(rec))
        return trust.export_lowp_trust(tmp_path, trust.machine_environment())["kernels"][
            "honest_f16_div"]
    got = earned(lambda r: None)
    assert got["earned"] == "fuzzed-against-contract" and "not ours" in got["reason"], got
    got = earned(lambda r: r.update(pairs=1 << 32, exhaustive=True))
    assert got["earned"] == "verified-against-contract" and SPEC in got["reason"], got
    got = earned(lambda r: r["reference"].update(contract_source="0" * 64))
    assert got["earned"] is None and "the source of the contract" in got["reason"], got
    got = earned(lambda r: r["reference"].pop("certification"))
    assert got["earned"] is None and "no certification" in got["reason"], got
    got = earned(lambda r: r.update(op="add", pairs=1 << 32, exhaustive=True))
    assert got["earned"] == "verified" and "contract" not in got["reason"]   # ours: ours


def test_a_replay_of_an_own_op_needs_its_contract_again(through_the_cli):
    files = sorted((through_the_cli / "replays").glob("lowp-reciprocal_bf16_div-*.json"))
    assert files and all(json.loads(f.read_text())["reproduced"] for f in files)
    cmd = [sys.executable, "-m", "conformance.cli", "lowp", "--replay", str(files[-1])]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and f"--op-contracts {SPEC}" in proc.stderr, proc.stderr
    proc = subprocess.run(cmd + ["--op-contracts", SPEC], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout.startswith("still fails: "), proc.stdout


def test_the_report_names_the_contract(through_the_cli):
    from reports.lowp import _view
    assert f"against the reference of the contract {SPEC}" in \
        _view(_rec(through_the_cli, "honest_bf16_div")).judged


@pytest.mark.parametrize("attr, says", [
    ("OURS", "op 'add' is one of ours"),
    ("IMPORTS_KERNELS", "imported the kernels' module `fixtures.plugins.low_precision_div`"),
    ("nothing_here", "AttributeError"),
])
def test_a_contract_the_judge_cannot_take_is_named(tmp_path, attr, says):
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_div:ALL",
                 "--op-contracts", f"fixtures.plugins.low_precision_div_contract:{attr}")
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("lowp-*.json"))


def test_an_own_op_without_its_contract_is_named(tmp_path):
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_div:ALL")
    assert proc.returncode == 2 and "of op `div`, which is not one of ours" in proc.stderr
    assert "--op-contracts MODULE:ATTR" in proc.stderr


def test_a_refused_contract_is_recorded_and_exits_2(tmp_path):
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_div:HONEST",
                 "--op-contracts", "fixtures.plugins.low_precision_div_contract:FLOAT32_DIV",
                 "--pair-stride", "65536", "--seed", "5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    rec = _rec(tmp_path, "honest_bf16_div")
    assert rec["status"] == "refused" and rec["failure_reasons"] == {"reference-refused": 1}
    assert "reference64 gives" in rec["message"] and rec["reference"]["by"] == "contract"
    assert trust.export_lowp_trust(tmp_path, trust.machine_environment())["kernels"][
        "honest_bf16_div"]["earned"] is None
