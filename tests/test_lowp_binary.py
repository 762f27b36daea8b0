"""The sweeps of binary 16-bit kernels over all pairs (conformance/lowp/binary.py): the
references are the correctly rounded results (checked against integer arithmetic here), honest
kernels pass, buggy ones fail for their reason, hostile ones never pass, through the kernel
process as a user runs it; on a GPU the judge on CuPy agrees with NumPy's and sweeps all 2^32."""
from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from conformance.lowp import binary
from conformance.lowp.formats import BFLOAT16, FLOAT16
from conformance.lowp.kernel import pair_inputs

pytest.importorskip("ml_dtypes")
from fixtures.plugins import low_precision_binary as fx   # noqa: E402  (needs ml_dtypes)

REPO = Path(__file__).resolve().parent.parent
SAMPLE = binary.select_rows(997)      # 66 rows of every 997th pattern and 24 special ones


def _round_exact(fmt, q: Fraction) -> float:
    """q rounded to the format ties to even, in integer arithmetic (no float rounding)."""
    if q == 0:
        return 0.0
    sign, q = (-1.0 if q < 0 else 1.0), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    e = e if Fraction(2) ** e <= q else e - 1                  # 2^e <= q < 2^(e + 1)
    quantum = Fraction(2) ** (max(e, fmt.emin) - fmt.precision + 1)
    n, rest = divmod(q, quantum)
    n = int(n) + (1 if rest > quantum / 2 or (rest == quantum / 2 and n % 2) else 0)
    v = n * quantum
    return sign * (float("inf") if v > Fraction(fmt.max_finite) else float(v))


@pytest.mark.parametrize("fmt", [BFLOAT16, FLOAT16], ids=lambda f: f.name)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_the_reference_is_the_exact_result_correctly_rounded(fmt, op):
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 16, size=(2, 4000), dtype=np.uint32).astype(np.uint16)
    a, b = fmt.decode(bits[0]), fmt.decode(bits[1])
    # pairs of nearby magnitudes too, where sums cancel and ties are frequent
    a = np.concatenate([a, a[:1000]])
    with np.errstate(invalid="ignore"):      # NaN patterns stay NaN
        near = a[:1000] * (1 + rng.integers(-3, 4, 1000) * 2.0 ** -9)
    b = np.concatenate([b, fmt.round(near)])
    ref, _ = binary.reference(op, fmt, a, b)
    for x, y, r in zip(a, b, ref):
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        fx_, fy = Fraction(float(x)), Fraction(float(y))
        want = _round_exact(fmt, fx_ + fy if op == "add" else fx_ - fy if op == "sub"
                            else fx_ * fy)
        assert r == want or (np.isnan(r) and np.isnan(want)), (op, x, y, r, want)


def test_max_and_min_follow_the_contract_on_nan_and_signed_zero_ties():
    a = np.array([np.nan, 1.0, -0.0, 0.0, 2.0, -np.inf])
    b = np.array([1.0, np.nan, 0.0, -0.0, 3.0, np.inf])
    mx, _ = binary.reference("max", BFLOAT16, a, b)
    mn, _ = binary.reference("min", BFLOAT16, a, b)
    assert np.isnan(mx[:2]).all() and np.isnan(mn[:2]).all()
    assert np.signbit(mx[2]) and not np.signbit(mx[3])     # the first operand on a tie
    assert np.signbit(mn[2]) and not np.signbit(mn[3])
    assert mx[4:].tolist() == [3.0, np.inf] and mn[4:].tolist() == [2.0, -np.inf]


def test_pairs_cover_every_pattern_of_a_once_per_row():
    a, b = pair_inputs(np.array([7, 0xffff], dtype=np.uint16))
    assert a.size == b.size == 2 << 16
    assert np.array_equal(a[:1 << 16], np.arange(1 << 16)) and np.array_equal(a[1 << 16:],
                                                                               a[:1 << 16])
    assert set(b[:1 << 16]) == {7} and set(b[1 << 16:]) == {0xffff}
    assert binary.select_rows().size == 1 << 16 and binary.select_rows(1 << 16).size == 24


@pytest.mark.parametrize("kernel", fx.HONEST, ids=lambda k: k.name)
def test_honest_kernels_pass(kernel):
    rec = binary.sweep_pairs(kernel, "cpu", SAMPLE)
    assert rec["status"] == "passed" and rec["failure_reasons"] == {}, rec["counterexamples"]
    assert rec["pairs"] == SAMPLE.size << 16 and rec["exhaustive"] is False
    assert rec["not_correctly_rounded"] == 0 and rec["max_ulps_passing"] <= 0.5


@pytest.mark.parametrize("kernel, reason", fx.BUGGY, ids=lambda k: getattr(k, "name", ""))
def test_buggy_kernels_fail_for_their_reason(kernel, reason):
    rec = binary.sweep_pairs(kernel, "cpu", SAMPLE)
    assert rec["status"] == "failed" and rec["failure_reasons"].get(reason, 0) > 0, rec
    ex = next(c for c in rec["counterexamples"] if c["reason"] == reason)
    a, b = (int(x, 16) for x in ex["input"].split(", "))
    got, _, _ = kernel.call_pairs(np.array([b], np.uint16))      # its row, as the sweep had it
    assert f"0x{int(got[a]):04x}" == ex["got"] != ex["expected"]     # the kernel's own answer


def test_a_truncating_add_fails_only_where_rounding_goes_away_from_zero():
    rec = binary.sweep_pairs(fx.BUGGY[0][0], "cpu", SAMPLE)
    # toward zero: the largest finite where the sum overflows to infinity
    assert set(rec["failure_reasons"]) == {"not-correctly-rounded", "inf-mismatch"}
    for ex in rec["counterexamples"]:
        want = BFLOAT16.decode(np.array([int(ex["expected"], 16)]))[0]
        assert abs(ex["got_value"]) < abs(want) and ex["got_value"] * want >= 0, ex
        assert ex["reason"] != "inf-mismatch" or abs(ex["got_value"]) == BFLOAT16.max_finite


def _lowp(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--evidence-dir",
                           str(out), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_the_cli_sweeps_through_the_kernel_process_as_in_process(tmp_path):
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_binary:FAST",
                 "--pair-stride", "4099")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {r["kernel"]: r for r in (json.loads(p.read_text())
                                     for p in tmp_path.glob("lowp-*.json"))}
    rows = binary.select_rows(4099)
    for k in fx.FAST:
        want = binary.sweep_pairs(k, "cpu", rows)
        got = recs[k.name]
        for ex in got["counterexamples"]:
            assert ex.pop("replay").startswith("replays/")     # the CLI's replay files
        for key in ("status", "failure_reasons", "pairs", "not_correctly_rounded",
                    "counterexamples", "max_ulps_passing"):     # as JSON: NaN inputs compare
            assert json.dumps(got[key]) == json.dumps(want[key]), (k.name, key)
        assert got["plugin"] == "fixtures.plugins.low_precision_binary:FAST"
    assert (f"8 16-bit kernel(s): 8 over {rows.size << 16} pairs (a sample), judged on cpu"
            in proc.stdout)
    assert "e.g. input 0x" in proc.stdout and "not-correctly-rounded" in proc.stdout


@pytest.mark.parametrize("kernel", fx.HOSTILE, ids=lambda k: k.name)
def test_hostile_kernels_never_pass_through_the_kernel_process(tmp_path, kernel):
    reason = fx.HOSTILE_REASONS[kernel.name]
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_binary:HOSTILE",
                 "--pair-stride", "16411")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rec = json.loads((tmp_path / f"lowp-{kernel.name}.json").read_text())
    assert rec["status"] == "failed" and rec["failure_reasons"].get(reason, 0) > 0, rec
    if reason == "raised":
        assert "expected bfloat16[" in rec["message"], rec["message"]


@pytest.mark.parametrize("args, says", [
    (["--pair-stride", "0"], "--pair-stride 0: expected an integer from 1"),
    (["--pair-stride", "70000"], "--pair-stride 70000: expected an integer from 1"),
])
def test_bad_arguments_are_named(tmp_path, args, says):
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_binary:FAST", *args)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("lowp-*.json"))


def test_device_cuda_without_a_gpu_is_named(tmp_path):
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        pytest.skip("this machine has a GPU")
    except Exception:
        pass
    proc = _lowp(tmp_path, "--plugin", "fixtures.plugins.low_precision_binary:FAST",
                 "--device", "cuda")
    assert proc.returncode == 2 and "--device cuda: no usable GPU" in proc.stderr, proc.stderr


@pytest.mark.cuda
def test_the_gpu_judge_agrees_with_numpys_on_a_shard():
    import cupy as cp
    rows = binary.select_rows(257)[:48]
    for kernel, _ in fx.BUGGY:
        bits, _, _ = kernel.call_pairs(rows)
        a, b = pair_inputs(rows)
        codes = []
        for xp in (np, cp):
            dec = [kernel.fmt.decode(xp.asarray(x), xp) for x in (a, b, bits)]
            code, ulps, _ = binary.judge_codes(kernel.op, kernel.fmt, kernel.bound_ulps, *dec,
                                               xp=xp)
            codes.append(code.get() if xp is cp else code)
        assert np.array_equal(codes[0], codes[1]) and codes[0].any(), kernel.name


@pytest.mark.cuda
def test_all_2_to_the_32_pairs_on_the_gpu():
    """PyTorch's float16 mul on the GPU (a kernel fast enough for 2^32 pairs in a test; the
    fixtures compute in NumPy) over every pair, and a planted truncation of its results caught."""
    pytest.importorskip("torch")
    from conformance.lowp.kernel import LowpKernel
    from conformance.peers.torch_lowp import BINARY_ENTRIES
    mul = next(k for k in BINARY_ENTRIES(("mul",)) if k.fmt is FLOAT16)
    rec = binary.sweep_pairs(mul, "cuda")
    assert rec["exhaustive"] and rec["pairs"] == 1 << 32 and rec["judged_on"] == "cuda"
    assert rec["status"] == "passed", rec["counterexamples"]

    def truncated(a, b):      # the last bit of every odd result cleared: a planted misrounding
        out = mul.fn(a, b).view(np.uint16).copy()
        out[1::2] &= 0xfffe
        return out.view(a.dtype)
    bad = binary.sweep_pairs(LowpKernel("truncated_mul", "mul", FLOAT16, truncated), "cuda",
                             binary.select_rows(64))
    assert bad["status"] == "failed" and bad["failure_reasons"].get("not-correctly-rounded")


class _InexactExp2:
    """NumPy, but exp2 one float64 ulp high, as CUDA's double exp2 may be at integers (it is
    documented within an ulp, not exact): the ulps and roundings must not depend on it."""

    def __getattr__(self, name):
        if name == "exp2":
            return lambda x: np.exp2(x) * (1 + 2.0 ** -52)
        return getattr(np, name)


@pytest.mark.parametrize("fmt", [BFLOAT16, FLOAT16], ids=lambda f: f.name)
def test_rounding_and_ulps_do_not_lean_on_an_exact_exp2(fmt):
    x = fmt.decode(fmt.all_bits())
    x = x[np.isfinite(x)]
    sums = np.add.outer(x[::97], x[1::89]).ravel()
    shim = _InexactExp2()
    assert np.array_equal(fmt.ulp(sums, shim), fmt.ulp(sums))
    assert np.array_equal(fmt.round(sums, shim), fmt.round(sums), equal_nan=True)
    b = fmt.all_bits()
    assert np.array_equal(fmt.decode(b, shim), fmt.decode(b), equal_nan=True)


def test_a_kernel_that_fails_with_a_shard_asked_for_ahead_leaves_the_process_in_step():
    # the judge asks for shard i + 1 before judging shard i; when shard i fails, the answer to
    # i + 1 is read and dropped, so the next kernel of the same process gets its own answers
    from conformance.lowp.remote import open_kernels
    from conformance.lowp.sweep import LowpKernelError
    rows = binary.select_rows(2053)           # 32 + the special rows: 3 shards of 16 on the CPU
    assert rows.size > 2 * binary.SHARD_ROWS["cpu"]
    process, (half, honest) = open_kernels("fixtures.plugins.low_precision_binary:"
                                           "HALF_THEN_HONEST")
    try:
        with pytest.raises(LowpKernelError, match="expected bfloat16"):
            binary.sweep_pairs(half, "cpu", rows)
        assert half._posted == []
        got = binary.sweep_pairs(honest, "cpu", rows)
    finally:
        process.close()
    want = binary.sweep_pairs(fx.HONEST[0], "cpu", rows)
    assert got["status"] == want["status"] == "passed"
    assert got["pairs"] == want["pairs"] == rows.size << 16
    assert json.dumps(got["max_ulps_passing"]) == json.dumps(want["max_ulps_passing"])
