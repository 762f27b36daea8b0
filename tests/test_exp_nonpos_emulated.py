"""tl_exp_nonpos (engine/csrc/cuda/tl_rows.cuh), the register softmax forward's exp, emulated
operation for operation on the host (each fma rounded once through exact rationals, the table as
correctly rounded 2^(j/64) less 2 float64 ulps of slack): its header claims relative error under
2^-50 on [-745.2, 0]. The constants are read from the header, so a changed constant is tested."""
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest
from mpmath import mp, mpf

HEADER = Path(__file__).resolve().parent.parent / "engine/csrc/cuda/tl_rows.cuh"


def _constants() -> dict[str, float]:
    body = HEADER.read_text().split("tl_exp_nonpos(double d", 1)[1].split("\n}\n", 1)[0]
    fmas = re.findall(r"fma\(-k, ([0-9.e+-]+), ", body)
    scale = re.search(r"fma\(d, ([0-9.]+), shift\)", body).group(1)
    return {"log2e64": float(scale), "hi": float(fmas[0]), "lo": float(fmas[1])}


def _fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _emulated(d: float, c: dict, table: list[float]) -> float:
    if not d >= -745.2:
        return d if d != d else 0.0
    shift = 6755399441055744.0
    s = _fma(d, c["log2e64"], shift)
    k = s - shift
    ki = int(k)
    r = _fma(-k, c["hi"], d)
    r = _fma(-k, c["lo"], r)
    p = _fma(r, 1.0 / 120.0, 1.0 / 24.0)
    p = _fma(p, r, 1.0 / 6.0)
    p = _fma(p, r, 0.5)
    p = _fma(p, r, 1.0)
    tj = table[ki & 63]
    y = _fma(tj, p * r, tj)
    q = ki >> 6
    return y * 2.0 ** q if q >= -1020 else (y * 2.0 ** (q + 600)) * 2.0 ** -600


@pytest.mark.parametrize("table_ulps", [0, 2, -2])
def test_relative_error_is_under_2_to_minus_50(table_ulps):
    mp.prec = 120
    c = _constants()
    # libdevice exp2 is within 2 float64 ulps: perturb the table by that much either way
    table = [float(mp.power(2, mpf(j) / 64) * (1 + table_ulps * mpf(2) ** -53)) for j in range(64)]
    rng = random.Random(17)
    points = [-rng.random() * rng.choice([1e-300, 1e-9, 1e-3, 0.3, 1.0, 30.0, 700.0, 745.0])
              for _ in range(2500)]
    points += [0.0, -0.0, -5e-324, -0.0054, -0.00542, -104.9, -708.4, -709.8, -744.4, -745.1]
    worst = mpf(0)
    for d in points:
        ref = mp.exp(mpf(d))
        if ref < mpf(2) ** -1020:   # double's subnormal range: no float32 result is that small
            continue
        worst = max(worst, abs((mpf(_emulated(d, c, table)) - ref) / ref))
    assert worst < mpf(2) ** -50, float(worst)


def test_specials():
    c = _constants()
    table = [2.0 ** (j / 64) for j in range(64)]
    assert _emulated(float("-inf"), c, table) == 0.0
    assert _emulated(-746.0, c, table) == 0.0
    nan = _emulated(float("nan"), c, table)
    assert nan != nan
    assert _emulated(0.0, c, table) == 1.0
