"""selective_scan's reference forward (object-array dyadic arithmetic plus a float64 track of
special values, conformance/references/selective_scan.py) gives the same bits as its exact mpf
recurrence (_exact_h, rounded by _round), and its VJP (rows of extended values) the same bits as
the mpf VJP (_vjp_mpf), on inputs chosen to reach every branch: subnormal and
overflowing exact values, exact cancellation to zero, mantissas past 2^53, infinities and NaNs in
B, X, h0 and the cotangent (inf * 0 and inf - inf included), zeros in A, constant and per-token coefficients.
The two are compared bit for bit, NaN bits included: no tolerance. A float64 evaluation of the
recurrence (one rounding per operation) differs from both on these inputs, so they can tell a
correct evaluation from an incorrect one."""
import numpy as np
import pytest

from conformance.references import selective_scan as S

F32 = np.float32


def _mpf_path(inputs):
    A, B, X, h0, token = S._checked(inputs)
    rows = S._exact_h(A, B, X, h0, token)
    return S._round([r for row in rows for r in row], X.shape)


def _float64_path(inputs):
    """A plausible wrong reference: the recurrence in float64, rounded at every operation."""
    A, B, X, h0, token = S._checked(inputs)
    h, out = h0.astype(np.float64), np.empty(X.shape, np.float64)
    with np.errstate(all="ignore"):
        for t in range(X.shape[0]):
            r = t if token else 0
            h = A[r].astype(np.float64) * h + B[r].astype(np.float64) * X[t].astype(np.float64)
            out[t] = h
    with np.errstate(all="ignore"):
        return out.astype(F32), out


def _mixed(rng, shape, specials):
    """Values over the whole float32 range: normal, subnormal, huge, zeros, and (if asked)
    infinities and NaNs."""
    exponent = rng.integers(-150, 128, shape).astype(np.float64)
    v = (rng.uniform(0.5, 1.0, shape) * np.exp2(exponent) * rng.choice([-1, 1], shape))
    v = v.astype(F32)
    picks = rng.random(shape)
    v[picks < 0.05] = 0.0
    v[(picks >= 0.05) & (picks < 0.08)] = F32(2.0 ** -149)
    if specials:
        v[(picks >= 0.08) & (picks < 0.10)] = np.inf
        v[(picks >= 0.10) & (picks < 0.12)] = -np.inf
        v[(picks >= 0.12) & (picks < 0.14)] = np.nan
    return v


def _cases():
    rng = np.random.default_rng(20261206)
    cases = []
    for seq, state, token, specials in ((1, 4096, False, True), (3, 2048, True, True),
                                        (40, 64, True, True), (300, 3, False, False),
                                        (2, 1000, False, False), (0, 5, True, False),
                                        (4, 0, False, False)):
        coef = (seq, state) if token else (state,)
        A = _mixed(rng, coef, False)   # half of A in [-1.1, 1.1]: long chains stay in range
        unit = rng.random(coef) < 0.5
        A[unit] = rng.uniform(-1.1, 1.1, coef).astype(F32)[unit]
        cases.append([A, _mixed(rng, coef, specials), _mixed(rng, (seq, state), specials),
                      _mixed(rng, (state,), specials)])
    # exact cancellation (+0 wanted), overflow of an exact sum of finite terms, decay to
    # subnormals, and a long chain of unit-range coefficients (mantissas far past 2^53)
    big = F32(2.0 ** 127)
    cases.append([np.array([1.0, 1.0, 1.0], F32), np.array([1.0, 1.0, -1.0], F32),
                  np.array([[-3.0, big, big]], F32), np.array([3.0, big, big], F32)])
    cases.append([np.full(200, 0.5, F32), np.full(200, 2.0 ** -140, F32),
                  np.full((2, 200), 1.5, F32), np.full(200, 2.0 ** -120, F32)])
    # decay through float64's subnormals to a signed zero (values rounded by _round_dyadic)
    cases.append([np.full(3, -1.5 * 2.0 ** -30, F32), np.zeros(3, F32), np.zeros((40, 3), F32),
                  np.array([1.25, -1.75, 1.1], F32)])
    cases.append([rng.uniform(-1.1, 1.1, (500, 2)).astype(F32),
                  rng.standard_normal((500, 2)).astype(F32),
                  rng.standard_normal((500, 2)).astype(F32), np.ones(2, F32)])
    return cases


CASES = _cases()


@pytest.mark.parametrize("index", range(len(CASES)))
def test_the_fast_forward_is_the_exact_recurrence_bit_for_bit(index):
    inputs = CASES[index]
    ref = S.forward(inputs)
    value, exact = _mpf_path(inputs)
    assert ref.value.dtype == np.float32 and ref.exact.dtype == np.float64
    assert ref.value.tobytes() == value.tobytes()
    assert ref.exact.tobytes() == exact.tobytes()


def test_the_cases_reach_every_branch_and_tell_a_wrong_evaluation_apart():
    values = np.concatenate([S.forward(c).value.reshape(-1) for c in CASES])
    exacts = np.concatenate([S.forward(c).exact.reshape(-1) for c in CASES])
    assert np.isnan(values).any() and np.isposinf(values).any() and np.isneginf(values).any()
    assert (values == 0).any() and (np.abs(values) < 2.0 ** -126)[values != 0].any()
    assert np.isinf(values[np.isfinite(exacts)]).any()   # float32 overflow of a finite value
    assert ((exacts != 0) & (np.abs(exacts) < 2.0 ** -1022)).any()   # float64 subnormals
    assert (np.signbit(exacts) & (exacts == 0)).any()   # a negative value rounded to -0
    wrong = 0
    for c in CASES:
        value, exact = _float64_path(c)
        ref = S.forward(c)
        wrong += ref.exact.tobytes() != exact.tobytes()
        wrong += ref.value.tobytes() != value.tobytes()
    assert wrong >= 2


def _cotangent(index):
    """A cotangent for case `index`: the same mix of values, specials only where the inputs have
    them (and ordinary normals on the long chains)."""
    rng = np.random.default_rng(1000 + index)
    shape = CASES[index][2].shape
    specials = not all(np.all(np.isfinite(v)) for v in CASES[index])
    return _mixed(rng, shape, specials) if index < 7 else rng.standard_normal(shape).astype(F32)


@pytest.mark.parametrize("index", range(len(CASES)))
def test_the_fast_vjp_is_the_exact_vjp_bit_for_bit(index):
    inputs, g = CASES[index], _cotangent(index)
    fast, slow = S.vjp(inputs, g), S._vjp_mpf(inputs, g)
    assert len(fast) == len(slow) == 4
    for got, want in zip(fast, slow):
        assert got.kind == want.kind == "composite"
        assert got.value.dtype == np.float32 and got.exact.dtype == np.float64
        assert got.value.shape == want.value.shape and got.exact.shape == want.exact.shape
        assert got.value.tobytes() == want.value.tobytes()
        assert got.exact.tobytes() == want.exact.tobytes()


def test_the_vjp_cases_reach_special_and_exact_zero_gradients():
    grads = [r for i in range(len(CASES)) for r in S.vjp(CASES[i], _cotangent(i))]
    values = np.concatenate([r.value.reshape(-1) for r in grads])
    assert np.isnan(values).any() and np.isposinf(values).any() and np.isneginf(values).any()
    assert (values == 0).any() and np.isfinite(values).sum() > values.size // 2


def test_long_mantissas_round_once_as_the_integer_rounding_does():
    """_round_dyadics on mantissas past 2^53 (the cut to 64 or 32 bits plus a sticky bit) against
    rounding's integer rounding: ties and near-ties of float32 and float64 at every length, carries
    out of all-ones mantissas, the float32 subnormal and overflow boundaries, values past the
    +-1000 binade band (left to the integer rounding) and both signs."""
    import random

    from conformance import rounding
    rnd = random.Random(5)
    mans, exps = [], []
    for i in range(6000):
        bc = rnd.choice([54, 63, 64, 65, 90, 1023, 1025, 3000])
        a = rnd.getrandbits(bc) | (1 << (bc - 1))
        if i % 4 == 1:       # float32 (cut 25) or float64 (cut 54) midpoint, exactly or just off
            cut = rnd.choice([25, 54])
            off = rnd.choice([0, 1, 1 << rnd.randrange(max(bc - cut, 1))])
            a = ((a >> (bc - cut)) | 1) << (bc - cut) | off
        elif i % 4 == 2:
            a = (1 << bc) - 1
        top = rnd.choice([rnd.randint(-1010, 1010), rnd.randint(-152, 129),
                          rnd.randint(-1080, -1015),
                          rnd.choice([-1001, -1000, 1000, 1001, -151, -150, -149, -126, 127, 128])])
        mans.append(-a if i % 2 else a)
        exps.append(top - bc + 1)
    man = np.empty(len(mans), object)
    man[:] = mans
    value, exact = S._round_dyadics(man, np.array(exps, np.int64), (len(mans),))
    want32 = [rounding.round_dyadic_to_f32(m, e) for m, e in zip(mans, exps)]
    want64 = [rounding.round_dyadic_to_f64(m, e) for m, e in zip(mans, exps)]
    assert value.view(np.uint32).tolist() == np.array(want32, F32).view(np.uint32).tolist()
    assert exact.view(np.uint64).tolist() == np.array(want64, np.float64).view(np.uint64).tolist()
