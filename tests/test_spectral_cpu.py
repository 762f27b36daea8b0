"""The spectral family on the CPU: the packed rfft / irfft entry points and fft_fno as
docs/OPS.md states them (values, the normalisation, the Hermitian bin weights, the VJPs), their
mpmath references and derived bounds (and that the harness catches wrong kernels under them),
the RuntimeEntry capsules' place in the registry and planning, and the fno1d example."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.families import spectral as D
from conformance import generators
from conformance.campaign import check_case
from conformance.references import _spectral as S
from conformance.references import get as reference
from engine import ops
from engine.errors import NonFiniteInputError, ShapeError
from engine.registry import registry
from engine.tensor import tensor
from capsule_mutants import mutant
from engine.ops import LOCAL_VJP
from engine.types import BackendOp as Op, Device, Provider, RuntimeEntry as Entry

pytestmark = pytest.mark.capsules("reference.rfft", "reference.irfft", "reference.fft_fno")
f32 = np.float32


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def _case(op, *inputs, **params):
    return generators.Case(op, "normal", tuple(np.asarray(a, f32) for a in inputs), params,
                           seed=0, index=0)


# --- values ---------------------------------------------------------------------------------------

def test_rfft_known_values_are_exact_and_unnormalised(cpu_session):
    # x = 1, 2, 3, 4: X_0 = 10, X_1 = -2 + 2i, X_2 = -2 (every value exact in float32)
    z = ops.rfft(tensor(np.array([[1, 2, 3, 4]], f32))).numpy()
    assert z.shape == (1, 3, 2)
    assert np.array_equal(z, np.array([[[10, 0], [-2, 2], [-2, 0]]], f32))


def test_irfft_scales_by_one_over_n_and_drops_the_dc_and_nyquist_imaginary_parts(cpu_session):
    z = np.array([[[10, 5], [-2, 2], [-2, 7]]], f32)     # imaginary parts at DC and Nyquist
    x = ops.irfft(tensor(z), 4).numpy()
    assert np.array_equal(x, np.array([[1, 2, 3, 4]], f32))   # as without them
    # odd n has no Nyquist bin: the last imaginary part is read
    z5 = ops.rfft(tensor(np.array([[1, -2, 3, 0.5, 4]], f32)))
    assert np.allclose(ops.irfft(z5, 5).numpy(), [[1, -2, 3, 0.5, 4]], atol=4 * 2.0 ** -22)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 31, 64, 97])
def test_round_trip_within_the_derived_fft_bounds(cpu_session, n):
    # irfft(rfft(x)) = x; each transform within F(n) of its norm (families/spectral.py): the sum of
    # rfft's error through irfft (1 / sqrt(n) of ||y||) and irfft's own
    x = _normal(np.random.default_rng(n), 3, n)
    y = ops.irfft(ops.rfft(tensor(x)), n).numpy()
    f = D.fft_factor(n, 2.0 ** -24)
    norm = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=1, keepdims=True))
    bound = (2 * f * math.sqrt(2) + 2.0 ** -22) * norm + 2.0 ** -24 * np.abs(x)
    assert np.all(np.abs(y - x) <= bound)


def test_fft_fno_with_identity_weights_on_every_mode_is_the_identity(cpu_session):
    # TorchLean's spectral identity test (3e-4 there): all grid // 2 + 1 modes, w = I
    rng = np.random.default_rng(3)
    for grid, width in ((8, 3), (9, 2), (1, 4)):
        m = grid // 2 + 1
        x = _normal(rng, 2, grid, width)
        eye = np.broadcast_to(np.eye(width, dtype=f32), (m, width, width)).copy()
        y = ops.fft_fno(tensor(x), tensor(eye), tensor(np.zeros_like(eye))).numpy()
        assert np.allclose(y, x, rtol=0, atol=8 * 2.0 ** -24 * np.abs(x).max() * grid)


def test_fft_fno_keeps_only_the_first_modes_and_divides_by_grid_once(cpu_session):
    # a pure mode-3 cosine survives modes = 4 and vanishes under modes = 3; w = 2 doubles it
    grid = 16
    x = np.cos(2 * np.pi * 3 * np.arange(grid) / grid).astype(f32)[:, None]
    two = np.full((4, 1, 1), 2, f32)
    y = ops.fft_fno(tensor(x), tensor(two), tensor(np.zeros_like(two))).numpy()
    assert np.allclose(y, 2 * x, atol=1e-6)
    y3 = ops.fft_fno(tensor(x), tensor(two[:3]), tensor(np.zeros_like(two[:3]))).numpy()
    assert np.abs(y3).max() < 1e-6
    # the imaginary weight rotates the mode: i * 2 (cos) -> -2 sin
    y_rot = ops.fft_fno(tensor(x), tensor(np.zeros_like(two)), tensor(two)).numpy()
    sin = np.sin(2 * np.pi * 3 * np.arange(grid) / grid)[:, None]
    assert np.allclose(y_rot, -2 * sin, atol=1e-6)


def test_fft_fno_batch_axis_equals_repeated_single_samples(cpu_session):
    rng = np.random.default_rng(4)
    x, wr, wi = _normal(rng, 3, 10, 2), _normal(rng, 4, 2, 2), _normal(rng, 4, 2, 2)
    whole = ops.fft_fno(tensor(x), tensor(wr), tensor(wi)).numpy()
    for b in range(3):
        one = ops.fft_fno(tensor(x[b]), tensor(wr), tensor(wi)).numpy()
        assert np.array_equal(one, whole[b])


# --- VJPs ----------------------------------------------------------------------------------------

def _fd_check(fn, inputs, eps=1e-2, tol=2e-2):
    """TorchLean's finite-difference gradient test (eps 1e-2, tolerance 2e-2) on sum(out * c):
    the ops are linear in each input, so the central difference is exact up to roundings."""
    ts = [tensor(a, requires_grad=True) for a in inputs]
    out = fn(*ts)
    c = _normal(np.random.default_rng(9), *out.shape)
    ops.reduce_sum(ops.mul(out, tensor(c))).backward()

    def value(arrays):
        return float(np.sum(fn(*[tensor(a) for a in arrays]).numpy().astype(np.float64) * c))
    for i, (t, a) in enumerate(zip(ts, inputs)):
        for idx in list(np.ndindex(a.shape))[:6]:
            up, dn = [x.copy() for x in inputs], [x.copy() for x in inputs]
            up[i][idx] += eps
            dn[i][idx] -= eps
            fd = (value(up) - value(dn)) / (2 * eps)
            assert abs(fd - float(t.grad.numpy()[idx])) <= tol, (i, idx)


def test_finite_difference_gradients_match_the_tape(cpu_session):
    rng = np.random.default_rng(5)
    _fd_check(lambda x, wr, wi: ops.fft_fno(x, wr, wi),
              [_normal(rng, 2, 8, 2), _normal(rng, 5, 2, 2), _normal(rng, 5, 2, 2)])
    _fd_check(lambda x: ops.rfft(x), [_normal(rng, 2, 7)])
    _fd_check(lambda z: ops.irfft(z, 6), [_normal(rng, 2, 4, 2)])


def test_the_gradient_of_the_dc_and_nyquist_imaginary_parts_is_zero(cpu_session):
    z = tensor(_normal(np.random.default_rng(6), 2, 5, 2), requires_grad=True)   # n = 8
    ops.reduce_sum(ops.mul(ops.irfft(z, 8), tensor(_normal(np.random.default_rng(7), 2, 8)))
                   ).backward()
    g = z.grad.numpy()
    assert np.all(g[:, 0, 1] == 0) and np.all(g[:, 4, 1] == 0) and np.all(g[:, 1:4, 1] != 0)


# --- references, bounds and the harness ----------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_the_mpmath_and_float64_reference_paths_agree_within_the_float64_bound(n, monkeypatch):
    rng = np.random.default_rng(n)
    x = _normal(rng, 2, n)
    z = np.stack([_normal(rng, 2, n // 2 + 1), _normal(rng, 2, n // 2 + 1)], axis=-1)
    fno = (_normal(rng, 2, n, 2), _normal(rng, n // 2 + 1, 2, 2), _normal(rng, n // 2 + 1, 2, 2))
    cases = [("rfft", (x,), {}), ("irfft", (z,), {"n": n}), ("fft_fno", fno, {})]
    for op, inputs, params in cases:
        mod = reference(op)
        g = _normal(rng, *mod.forward(inputs, **params).value.shape)
        mp = (mod.forward(inputs, **params), *mod.vjp(inputs, g, **params))
        monkeypatch.setattr(S, "MP_PRODUCTS", -1)          # every case on the float64 path
        f64 = (mod.forward(inputs, **params), *mod.vjp(inputs, g, **params))
        monkeypatch.undo()
        for a, b in zip(mp, f64):
            scale = np.sqrt(np.sum(np.asarray(a.exact) ** 2)) * math.sqrt(max(n, 1)) + 1
            assert np.all(np.abs(a.exact - b.exact) <= D.F64_RELATIVE * scale * 16), op


def test_the_fft_factor_is_higham_for_powers_of_two_and_declared_larger_otherwise():
    u = 2.0 ** -24
    eta = 2 * u + (4 * u / (1 - 4 * u)) * (math.sqrt(2) + 2 * u)
    assert D.fft_factor(1, u) == 0.0
    assert D.fft_factor(1024, u) == pytest.approx(2 * 11 * eta / (1 - 11 * eta))
    assert D.fft_factor(1025, u) > 4 * D.fft_factor(1024, u)
    assert D.fft_factor(7, u) < 1e-4


SMALL = [
    (Entry.rfft, lambda r: (_normal(r, 2, 8),), {}),
    (Entry.rfft, lambda r: (_normal(r, 3, 7),), {}),
    (Entry.irfft, lambda r: (_normal(r, 2, 5, 2),), {"n": 8}),
    (Entry.irfft, lambda r: (_normal(r, 2, 4, 2),), {"n": 7}),
    (Op.fft_fno, lambda r: (_normal(r, 2, 8, 3), _normal(r, 5, 3, 3), _normal(r, 5, 3, 3)), {}),
    (Op.fft_fno, lambda r: (_normal(r, 9, 2), _normal(r, 1, 2, 2), _normal(r, 1, 2, 2)), {}),
    (Op.fft_fno, lambda r: (_normal(r, 2, 1, 2), _normal(r, 1, 2, 2), _normal(r, 1, 2, 2)), {}),
]


@pytest.mark.parametrize("op, draw, params", SMALL, ids=lambda v: getattr(v, "label", ""))
def test_reference_capsules_pass_forward_vjp_and_identity(op, draw, params):
    case = _case(op, *draw(np.random.default_rng(11)), **params)
    res = check_case(*registry().get(f"reference.{op.label}"), case, {},
                     identity_rng=np.random.default_rng(1))
    assert not res.failures and res.vjp is not None and res.vjp.identity == "passed"


def test_the_harness_catches_wrong_spectral_kernels():
    rng = np.random.default_rng(12)
    x = _normal(rng, 2, 8, 3)
    w = (_normal(rng, 5, 3, 3), _normal(rng, 5, 3, 3))
    ref_fno = registry().handler("reference.fft_fno").forward
    wrong = {
        # the Nyquist bin weighted 2 like an interior bin
        "nyquist": lambda a, b, c: ref_fno(a, b, c) + _nyquist_twice(a, b, c),
        # irfft's 1/n applied twice (y = C2R(Z) / grid^2)
        "double scale": lambda a, b, c: (ref_fno(a, b, c) / f32(8)).astype(f32),
        # the conjugate weights
        "conj": lambda a, b, c: ref_fno(a, b, (-c).astype(f32)),
    }
    for why, fn in wrong.items():
        cap, handler = mutant("reference.fft_fno", forward=fn)
        res = check_case(cap, handler, _case(Op.fft_fno, x, *w), {})
        assert any(f.output == "value" for f in res.failures), why
    # a VJP that leaves the DC imaginary gradient of irfft nonzero
    rule = LOCAL_VJP[Entry.irfft]

    def leaky(i, o, g, n):
        (dz,) = rule(i, o, g, n=n)
        dz = dz.copy()
        dz[:, 0, 1] = 0.25
        return (dz,)
    cap, handler = mutant("reference.irfft", vjp=leaky)
    res = check_case(cap, handler, _case(Entry.irfft, _normal(rng, 2, 5, 2), n=8), {})
    assert any(f.output.startswith("grad") for f in res.failures)


def _nyquist_twice(x, w_re, w_im):
    """fft_fno as if C2R weighted the Nyquist bin 2: the reference plus one more copy of it."""
    grid = x.shape[-2]
    xk = np.fft.rfft(x.astype(np.float64), axis=-2)[..., grid // 2, :]
    z = np.einsum("...c,co->...o", xk, w_re[grid // 2] + 1j * w_im[grid // 2])
    sign = np.cos(np.pi * np.arange(grid))[:, None]
    return (np.real(z)[..., None, :] * sign / grid).astype(f32)


# --- guards, registry, planning ------------------------------------------------------------------

def test_non_finite_inputs_are_rejected_by_name(cpu_session):
    x = np.ones((2, 4), f32)
    x[1, 2] = np.inf
    with pytest.raises(NonFiniteInputError, match="rfft: x holds a NaN or an infinity"):
        ops.rfft(tensor(x))
    with pytest.raises(ShapeError, match=r"modes = w_re.shape\[0\] = 6 is outside"):
        ops.fft_fno(tensor(np.ones((8, 1), f32)), tensor(np.ones((6, 1, 1), f32)),
                    tensor(np.ones((6, 1, 1), f32)))


def test_runtime_entries_have_capsules_beside_the_backend_ops(cpu_session):
    names = {c.name: c for c in registry().capsules()}
    for entry in (Entry.rfft, Entry.irfft):   # the spectral entries (cross_entropy: native_cuda)
        ref, cuf = names[f"reference.{entry.label}"], names[f"cufft.{entry.label}"]
        assert ref.op is entry and cuf.op is entry and cuf.provider is Provider.cufft
        assert cuf.device is Device.cuda
    assert names["cufft.fft_fno"].op is Op.fft_fno
    assert all(e.label not in {o.label for o in Op} for e in Entry)
    ops.rfft(tensor(np.ones((1, 4), f32)))
    assert cpu_session.dispatched[Entry.rfft].name == "reference.rfft"


def test_cufft_capsules_name_their_kernels_and_say_why_unavailable_here():
    from engine.native_sources import CUFFT_SOURCES
    from engine.runtime import loader
    text = loader.source_path("spectral.cu").read_text()
    for op, src in CUFFT_SOURCES.items():
        cap, handler = registry().get(f"cufft.{op.label}")
        for _, symbol in src.kernels():
            assert f"void {symbol}(" in text
            assert symbol in cap.value_contract.provenance.native_symbol
        why = handler.unavailable()
        assert why is None or "cuFFT is not available" in why


# --- the fno1d example ----------------------------------------------------------------------------

def test_fno1d_learns_the_heat_operator_and_repeats_bit_for_bit():
    from engine.models import fno1d
    from engine.session import Session
    a = fno1d.run(Session("cpu"), steps=60, seed=7)
    b = fno1d.run(Session("cpu"), steps=60, seed=7)
    assert a.losses == b.losses and a.test_relative_l2 == b.test_relative_l2
    assert a.losses[-1][1] < a.losses[0][1] / 20
    assert a.test_relative_l2 < fno1d.baseline_relative_l2(7) / 2
    assert "fft_fno: reference.fft_fno" in a.backend_report


def test_heat_data_is_the_exact_fourier_solution():
    from engine.models import fno1d
    x, y = fno1d.heat_data(3, 1)
    u0 = x[..., 0].astype(np.float64)
    k = np.fft.rfftfreq(fno1d.GRID, 1.0 / fno1d.GRID)
    want = np.fft.irfft(np.fft.rfft(u0, axis=1) * np.exp(-fno1d.NU * k ** 2 * fno1d.T),
                        n=fno1d.GRID, axis=1)
    assert np.allclose(y[..., 0], want, atol=1e-6)


def test_the_fno1d_command_reports_the_held_out_error(capsys):
    from engine.cli import main
    assert main(["fno1d", "--steps", "3", "--seed", "1", "--show-backend"]) == 0
    out = capsys.readouterr().out
    assert "held-out relative L2 error" in out and "fft_fno: reference.fft_fno" in out
    assert main(["fno1d", "--steps", "0"]) == 2
