"""native_cuda.flash_attention without a GPU: its declaration (variant, policy, symbols), what it
declines, who plans it, its shared-memory layouts, and its derived bound
(conformance/families/attention.py, FLASH): the rule's arithmetic, its lookup by capsule name, and a NumPy
float32 emulation of flash_attention.cu's schedule (small key tiles, so the online rescaling runs
several times per row) that passes the bound forward and VJP, while a mutant that forgets to
rescale O by alpha is flagged."""
import warnings

import numpy as np
import pytest

from conformance import families, generators
from conformance.families import attention
from conformance.campaign import check_case
from conformance.error_models import forward_model, vjp_model
from engine.capsule import FLASH, KernelHandler, standard_capsule
from engine.profile import (ACCURATE_CUDA, CHECKED_CUDA, FLASH_CUDA, GRAPH_CUDA,
                            profile_named)
from engine.providers.native_cuda import flash_attention as flash
from engine.registry import registry
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32, F64 = np.float32, np.float64
NAME = "native_cuda.flash_attention"
OP = Op.scaled_dot_product_attention


def test_the_capsule_is_the_flash_variant_of_attention():
    cap, handler = registry().get(NAME)
    assert cap.op is OP and cap.provider is Provider.native_cuda and cap.variant == FLASH
    assert cap.vjp_mode is VJPMode.backend_vjp and handler.vjp is not None
    pol = cap.numerical_policy
    assert (pol.contraction, pol.reduction, pol.subnormals) == (
        Contraction.fused, Reduction.fixed_left, Subnormals.gradual_underflow)
    assert cap.value_contract.declared_bound is None           # derived, by capsule name
    prov = cap.value_contract.provenance
    assert prov.source_file == "engine/csrc/cuda/flash_attention.cu"
    for w in flash.WIDTHS:
        for kind in ("fwd", "dkdv", "dq"):
            assert f"tl_flash_{kind}_{w}" in prov.native_symbol
    assert "tl_flash_rowdot" in prov.native_symbol
    assert "float32" in cap.value_contract.summary and "no atomics" in cap.value_contract.summary
    assert "online softmax" in cap.notes and "atomic" not in cap.notes.lower()
    # the op's plain native capsule is still direct attention
    plain = [c for c in registry().capsules(OP) if c.provider is Provider.native_cuda
             and c.variant is None]
    assert [c.name for c in plain] == ["native_cuda.direct_attention"]


def test_declines_head_dimensions_over_128_and_says_why():
    q, k, v = np.zeros((2, 3, 129), F32), np.zeros((2, 5, 129), F32), np.zeros((2, 5, 8), F32)
    why = flash.declines((q, k, v), {})
    assert why == ("head dimensions d = 129, dv = 8: the flash kernels are instantiated for d "
                   "and dv up to 128 (the kernel refuses larger ones with a ShapeError)")
    assert flash.declines((q[..., :128], k[..., :128], np.zeros((2, 5, 128), F32)), {}) is None
    assert flash.declines((np.zeros((0, 64), F32), np.zeros((9000, 64), F32),
                           np.zeros((9000, 1), F32)), {}) is None   # any Lk
    assert [flash.width(d, dv) for d, dv in ((0, 0), (32, 1), (33, 8), (64, 100), (128, 128),
                                            (8, 129))] == [32, 32, 64, 128, 128, None]


def test_shared_memory_layouts_fit_an_sm90_block():
    opt_in_max = 227 * 1024      # cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90
    for w in flash.WIDTHS:
        for kind in ("fwd", "dkdv", "dq"):
            assert flash.shared_bytes(kind, w) <= opt_in_max, (kind, w)
    # D = 128: k, v, q, g natural (64 x 132 floats each), P and dS (64 x 68), the flags
    assert flash.shared_bytes("dkdv", 128) == (4 * 64 * 132 + 2 * 64 * 68) * 4 + 4096
    # D = 64: three forward blocks and two of each backward kernel fit one sm_90 multiprocessor
    # (228 KiB, 1 KiB of it reserved per block): the occupancy the launch bounds are cut for
    assert 3 * (flash.shared_bytes("fwd", 64) + 1024) <= 228 * 1024
    for kind in ("dkdv", "dq"):
        assert 2 * (flash.shared_bytes(kind, 64) + 1024) <= 228 * 1024, kind


def test_checked_graph_and_flash_profiles_plan_it_accurate_cuda_keeps_composed():
    for profile in (CHECKED_CUDA, GRAPH_CUDA, FLASH_CUDA, profile_named("flash_cuda")):
        plan = profile.accept_graph([OP, Op.softmax])
        assert plan.kernel(OP).capsule.name == NAME, profile.name
        assert plan.kernel(Op.softmax).capsule.name == "native_cuda.softmax"
    assert ACCURATE_CUDA.accept_graph([OP]).kernel(OP).capsule.name == \
        "torchlean.composed_attention"


def test_the_rule_is_looked_up_by_capsule_name():
    cap, _ = registry().get(NAME)
    composed, _ = registry().get("torchlean.composed_attention")
    assert families.rule_for(OP, NAME) is attention.FLASH.forward
    assert families.rule_for(OP, NAME, vjp=True) is attention.FLASH.vjp
    assert families.rule_for(OP, composed.name) is families.FORWARD_RULES[OP]
    assert forward_model(cap, "composite").label.startswith("derived (flash)")
    assert vjp_model(cap, "composite").capsule == NAME
    assert forward_model(composed, "composite").label == families.FORWARD_RULES[OP].label


def test_the_rule_arithmetic():
    assert [attention.key_tiles(n) for n in (0, 1, 64, 65, 1024)] == [1, 1, 1, 2, 16]
    assert attention.sum_k(1024) == 16 + 7          # 3 serial adds + 4 tree levels + a fmaf/tile
    assert attention.out_k(1024) == 1024 + 16 + 1   # fmaf per key, rescale per tile, division
    sched = attention.FLASH_FORWARD
    assert (sched.arg_units, sched.c_exp, sched.c_div) == (2.0, 0.0, 0.0)
    assert sched.num_exps(130) == 3
    vjp = attention.FLASH_VJP
    assert (vjp.arg_units, vjp.den_arg_units, vjp.c_exp, vjp.c_div, vjp.ds_roundings,
            vjp.c_from_out) == (1.0, 2.0, 1.0, 2.0, 2, True)


# --- the emulation: flash_attention.cu's arithmetic in NumPy float32 -----------------------------

def _fma(a, b, c):
    """fmaf: a * b is exact in float64, the sum rounded (to float64, then float32: a double
    rounding off fmaf by at most half a float32 ulp in rare ties, far inside the bound)."""
    return (np.asarray(a, F64) * np.asarray(b, F64) + np.asarray(c, F64)).astype(F32)


def _rows(q, k, part, scale, tile):
    """Scores and the online statistics (m, l, any participant) of every row, as the forward."""
    b, lq, d = q.shape
    lk = k.shape[1]
    s = np.zeros((b, lq, lk), F32)
    for c in range(d):
        s = _fma(q[:, :, None, c], k[:, None, :, c], s)
    s = (s * F32(scale)).astype(F32)
    m, l = np.full((b, lq), -np.inf, F32), np.zeros((b, lq), F32)
    seen = np.zeros((b, lq), bool)
    tiles = []
    for j0 in range(0, lk, tile):
        st, pt = s[..., j0:j0 + tile], part[..., j0:j0 + tile]
        mt = np.max(np.where(pt, st, -np.inf), axis=-1, initial=-np.inf).astype(F32)
        mn = np.maximum(m, mt)
        mu = np.where(mn == -np.inf, F32(0), mn).astype(F32)
        alpha = np.where(mn == m, F32(1), np.exp((m - mu).astype(F32))).astype(F32)
        p = np.where(pt, np.exp((st - mu[..., None]).astype(F32)), F32(0)).astype(F32)
        ls = np.zeros((b, lq), F32)
        for jj in range(p.shape[-1]):
            ls = (ls + p[..., jj]).astype(F32)
        l = _fma(l, alpha, ls)
        m, seen = mn, seen | pt.any(axis=-1)
        tiles.append((j0, p, pt, alpha))
    return s, m, l, seen, tiles


def _batched(q, k, v, mask):
    part = np.ones(q.shape[:-1] + (k.shape[-2],), bool) if mask is None else np.asarray(mask)
    if q.ndim == 2:
        return q[None], k[None], v[None], part[None], False
    return q, k, v, part, True


def emulate_forward(tile, rescale_o=True):
    def forward(q, k, v, mask=None, scale=1.0):
        with np.errstate(all="ignore"):
            q, k, v, part, batched = _batched(q, k, v, mask)
            _, _, l, seen, tiles = _rows(q, k, part, scale, tile)
            o = np.full(q.shape[:-1] + (v.shape[-1],), -0.0, F32)
            for j0, p, pt, alpha in tiles:
                if rescale_o:
                    o = (o * alpha[..., None]).astype(F32)
                for jj in range(p.shape[-1]):
                    o = np.where(pt[..., jj, None],
                                 _fma(p[..., jj, None], v[:, None, j0 + jj, :], o), o)
            out = np.where(seen[..., None], (o / l[..., None]).astype(F32), F32(0)).astype(F32)
            return out if batched else out[0]
    return forward


def emulate_vjp(tile):
    def vjp(inputs, out, g, mask=None, scale=1.0):
        with np.errstate(all="ignore"):
            q, k, v, part, batched = _batched(*inputs, mask)
            out, g = (np.asarray(x, F32) if batched else np.asarray(x, F32)[None] for x in (out, g))
            s, m, l, seen, _ = _rows(q, k, part, scale, tile)
            inv_l = (F32(1) / l).astype(F32)
            mu = np.where(m == -np.inf, F32(0), m).astype(F32)
            p = np.where(part, (np.exp((s - mu[..., None]).astype(F32)) * inv_l[..., None])
                         .astype(F32), F32(0))
            dp = np.zeros(s.shape, F32)
            dd = np.zeros(l.shape, F32)
            for c in range(v.shape[-1]):
                dp = _fma(g[:, :, None, c], v[:, None, :, c], dp)
                dd = _fma(g[..., c], out[..., c], dd)
            dd = np.where(seen, dd, F32(0))
            ds = np.where(part, (p * (dp - dd[..., None]).astype(F32)).astype(F32), F32(0))
            dq = np.zeros(q.shape, F32)
            for j in range(k.shape[1]):
                dq = np.where(part[:, :, j, None], _fma(ds[:, :, j, None], k[:, None, j, :], dq), dq)
            dk, dvv = np.zeros(k.shape, F32), np.full(v.shape, -0.0, F32)
            for i in range(q.shape[1]):
                on = part[:, i, :, None]
                dk = np.where(on, _fma(ds[:, i, :, None], q[:, None, i, :], dk), dk)
                dvv = np.where(on, _fma(p[:, i, :, None], g[:, None, i, :], dvv), dvv)
            sc = F32(scale)
            dq = np.where(dq == 0, F32(0), (dq * sc).astype(F32))
            dk = np.where(dk == 0, F32(0), (dk * sc).astype(F32))
            dvv = np.where(part.any(axis=1)[..., None], dvv, F32(0))
            res = (dq.astype(F32), dk.astype(F32), dvv.astype(F32))
            return res if batched else tuple(x[0] for x in res)
    return vjp


POLICY = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow, Contraction.fused,
                         Reduction.fixed_left)
# (not "edges": its special-value cases take the reference minutes; the GPU tests cover them)
CLASSES = ("normal", "wide", "masks", "cancellation", "shapes", "signed-zero")
TILE = 4   # the emulation's key tile: several rescalings per row at the generators' sizes


def _campaign(monkeypatch, name, forward, vjp, cases=3):
    """Failure reasons of the emulated capsule over CLASSES, judged by the flash rule with the
    emulation's tile (attention.TILE patched to match)."""
    monkeypatch.setattr(attention, "TILE", TILE)
    monkeypatch.setitem(families.CAPSULE_FORWARD_RULES, name, attention.FLASH.forward)
    monkeypatch.setitem(families.CAPSULE_VJP_RULES, name, attention.FLASH.vjp)
    cap = standard_capsule(OP, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.backend_vjp, policy=POLICY,
                           source_file="tests/test_flash_attention_cpu.py", name=name)
    handler = KernelHandler(name, OP, Provider.custom_chip, Device.cpu, forward, vjp)
    failures, checked = set(), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for cls in CLASSES:
            for i in range(generators.class_size(OP, cls, cases)):
                case = generators.draw_case(OP, 11, cls, i)
                res = check_case(cap, handler, case, {}, repeat=False)
                failures |= res.reasons()
                if res.harness_error:
                    failures.add(f"harness error: {res.harness_error}")
                checked += 1
    return failures, checked


def test_an_emulated_flash_schedule_passes_the_flash_bound(monkeypatch):
    failures, checked = _campaign(monkeypatch, "emulated.flash_attention",
                                  emulate_forward(TILE), emulate_vjp(TILE))
    assert checked > 10 and failures == set(), failures


def test_a_flash_schedule_that_forgets_to_rescale_o_is_flagged(monkeypatch):
    failures, _ = _campaign(monkeypatch, "mutant.flash_no_rescale",
                            emulate_forward(TILE, rescale_o=False), emulate_vjp(TILE))
    assert "exceeds-bound" in failures
