"""The native-cuda capsules: numerical policies that follow the compile flags of
engine/runtime/loader.py.OPTIONS and each kernel's real reduction order, declared bounds where
libdevice functions or float64 evaluation decide the error, and registration."""
from __future__ import annotations

from engine.capsule import KernelHandler, standard_capsule
from engine.native_sources import SOURCES
from engine.providers.native_cuda import (attention, elementwise, index, norm, random, reduce,
                                          shape, softmax)
from engine.runtime import loader
from engine.types import (BackendOp as Op, Contraction, DeclaredBound, Device, NumericalPolicy,
                          Provider, Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

_RN, _GU = Rounding.nearest_even, Subnormals.gradual_underflow
EXACT = NumericalPolicy(_RN, _GU, Contraction.not_applicable, Reduction.not_applicable)
ROUNDED = NumericalPolicy(_RN, _GU, Contraction.separate, Reduction.not_applicable)
# Default mode accumulates with float atomicAdd: PTX atom.add.f32 flushes subnormal inputs and
# results to zero, while deterministic mode's ordinary adds keep them. One policy covers both.
ATOMIC_SUM = NumericalPolicy(_RN, Subnormals.implementation_defined, Contraction.separate,
                             Reduction.implementation_defined)
# Row kernels in double, as the reference provider's float64 composites: no float32 reduction
# happens (reduce=n/a, as reference.py labels them); the float64 sums run in a fixed order, so
# the results repeat bit for bit, and the declared once-rounded bound covers any order of them.
# Double never flushes and the final float rounding keeps subnormals (--ftz=false).
F64_ROWS = NumericalPolicy(_RN, _GU, Contraction.separate, Reduction.not_applicable)

ATOMIC_OPS = (Op.reduce_sum, Op.reduce_mean, Op.mse_loss, Op.scatter_add, Op.gather, Op.broadcast)
EXACT_OPS = (Op.max, Op.min, Op.abs, Op.clamp, Op.relu, Op.reshape, Op.permute, Op.concat,
             Op.slice, Op.rand_uniform, Op.bernoulli_mask)
ROW_OPS = (Op.softmax, Op.log_softmax, Op.hard_masked_softmax, Op.layer_norm, Op.batch_norm,
           Op.scaled_dot_product_attention)

_FLAGS = " ".join(loader.OPTIONS)
_GUIDE = ("CUDA C++ Programming Guide, Mathematical Functions appendix, single-precision table: "
          "maximum ulp error against the correctly rounded result, full range")
_F64_VJP = ("VJP evaluated in float64 from the input and rounded once: within 1 ulp of the "
            "rounded exact g * f'(a)")
LIBDEVICE_ULPS = {Op.exp: 2.0, Op.log: 1.0, Op.sin: 2.0, Op.cos: 2.0, Op.tanh: 2.0,
                  Op.safe_log: 1.0}
_LIBDEVICE_NAME = {Op.exp: "expf", Op.log: "logf", Op.sin: "sinf", Op.cos: "cosf",
                   Op.tanh: "tanhf", Op.safe_log: "logf"}
F64_ONCE = DeclaredBound(1.0, "evaluated in float64 with libdevice's double functions (a few "
                              "float64 ulps each, amplified at most |2u| <= 710 times through "
                              "exp) and rounded once to float32: under 0.5 + 2^-18 float32 ulp "
                              "of the exact value")
F64_ONCE_ROWS = DeclaredBound(1.0, "evaluated in float64 (libdevice exp/log1p within a few float64 "
                                   "ulps, sums of positive terms) and rounded once to float32: "
                                   "under 0.5 + 2^-20 float32 ulp of the exact value")
F64_ONCE_CANCELLING = DeclaredBound(
    1.0, "evaluated in float64 and rounded once, as the reference provider; a cancelling sum "
         "carries float64 error relative to its sum of |terms|, far under one u = 2^-24 of it",
    magnitude_units=1.0)

_SUMMARIES = {
    Op.reduce_sum: "float32 sums; chunk partials added with atomicAdd (order unspecified, "
                   "subnormals flushed by PTX) in default mode, a fixed two-level tree in "
                   "deterministic mode; within gamma_n * sum|x|",
    Op.reduce_mean: "reduce_sum's sum, then one division by the count (IEEE float division for "
                    "counts up to 2^24, float64 quotient rounded once above)",
    Op.mse_loss: "d = p - t and d*d each rounded in float32, summed as reduce_sum does, divided "
                 "once by n: within gamma_(n+2) * sum (p - t)^2 plus the final division",
    Op.scatter_add: "float32 adds into a copy of base: atomicAdd for duplicates in default mode "
                    "(subnormals flushed by PTX), a left fold in index order per column in "
                    "deterministic mode (bitwise equal to numpy.add.at)",
    Op.add: "IEEE float32 addition (one correctly rounded operation)",
    Op.sub: "IEEE float32 subtraction",
    Op.mul: "IEEE float32 multiplication",
    Op.scale: "alpha rounded to float32, one IEEE multiplication",
    Op.sqrt: "sqrtf under --prec-sqrt=true: correctly rounded",
    Op.inv: "1.0f / a under --prec-div=true: correctly rounded",
    Op.reshape: "a view of the same buffer: no kernel runs",
    Op.softmax: "one block per row: max, sum of exp(x - max) and the quotients in float64, "
                "rounded once",
    Op.log_softmax: "one block per row: x - max - log1p(rest) in float64, rounded once",
    Op.hard_masked_softmax: "one block per row over the participants only (blocked: exactly 0, "
                            "a row with none: zeros), float64, rounded once",
    Op.layer_norm: "one block per row, two-pass statistics (mean, then mean of squared "
                   "deviations) and the affine map in float64, rounded once",
    Op.batch_norm: "one block per channel over N x spatial, two-pass statistics in float64, "
                   "rounded once",
    Op.scaled_dot_product_attention: "direct fused kernel: a tile of query rows per block, "
                                     "scores, hard-masked softmax and p v in float64, rounded "
                                     "once; blocked keys take no part (a NaN in their v row "
                                     "does not leak)",
}


def _policy(op: Op) -> NumericalPolicy:
    if op in ATOMIC_OPS:
        return ATOMIC_SUM     # default mode accumulates with atomics (gather/broadcast: the VJP)
    if op in ROW_OPS:
        return F64_ROWS
    if op in EXACT_OPS:
        return EXACT
    return ROUNDED


def _notes(op: Op) -> str:
    parts = [f"compiled with {_FLAGS}"]
    if op in LIBDEVICE_ULPS or op in (Op.sigmoid, Op.softplus, Op.gelu, Op.sqrt, Op.inv):
        parts.append(_F64_VJP)
    if op in ATOMIC_OPS:
        parts.append("subnormal=implementation-defined: default mode's float atomicAdd (PTX "
                     "atom.add.f32) flushes subnormal inputs and results, deterministic mode "
                     "(TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS) replaces every atomic "
                     "accumulation with a fixed-order kernel that keeps them and repeats bit "
                     "for bit")
    if op in ROW_OPS:
        parts.append("forward and VJP in float64 with fixed-order sums (bitwise repeatable on "
                     "one GPU model), rounded once to float32")
    if op is Op.layer_norm:
        parts.append("dgamma and dbeta: per-block column partials summed by the last block in "
                     "block order; the block count follows the GPU's SM count")
    if op is Op.scaled_dot_product_attention:
        # (no word "atomic" here: conformance/determinism.py audits capsules whose notes say it)
        parts.append("backend VJP: a pass over query rows (dq and row statistics) and a pass "
                     "over keys (dk, dv), every sum a fixed fold; Lk is bounded by shared memory")
    return "; ".join(parts)


def _declared_bound(op: Op) -> DeclaredBound | None:
    if op in LIBDEVICE_ULPS:
        fn = _LIBDEVICE_NAME[op]
        return DeclaredBound(LIBDEVICE_ULPS[op], f"libdevice {fn}: {int(LIBDEVICE_ULPS[op])} ulp "
                             f"({_GUIDE}); not fast-math (no __{fn[:-1]}f intrinsic); libdevice's "
                             "internal FMAs are part of that bound")
    if op in (Op.sigmoid, Op.softplus, Op.gelu):
        return F64_ONCE
    if op in (Op.softmax, Op.log_softmax, Op.hard_masked_softmax):
        return F64_ONCE_ROWS
    if op in (Op.layer_norm, Op.batch_norm, Op.scaled_dot_product_attention):
        return F64_ONCE_CANCELLING
    return None


def handlers() -> dict[Op, tuple]:
    table: dict[Op, tuple] = {}
    for family in (elementwise, shape, reduce, index, random, softmax, norm):
        table.update(family.handlers())
    table[Op.scaled_dot_product_attention] = attention.HANDLER
    return table


def register_all(reg) -> None:
    for op, (forward, vjp) in handlers().items():
        src = SOURCES[op]
        vjp_mode = VJPMode.backend_vjp if op.needs_vjp else VJPMode.none
        name = "native_cuda.direct_attention" if op is Op.scaled_dot_product_attention else None
        cap = standard_capsule(
            op, Provider.native_cuda, Device.cuda, trust=TrustLevel.checked, vjp_mode=vjp_mode,
            policy=_policy(op), source_file=src.path, native_symbol=src.symbols,
            value_summary=_SUMMARIES.get(op, ""), declared_bound=_declared_bound(op),
            notes=_notes(op), name=name)
        declines = attention.declines if op is Op.scaled_dot_product_attention else None
        reg.register(cap, KernelHandler(cap.name, op, Provider.native_cuda, Device.cuda,
                                        forward, vjp, declines=declines))
