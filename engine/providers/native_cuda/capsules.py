"""The native-cuda capsules, built from the kernel declarations of the family modules and the
compile flags engine/runtime/loader.py really passes (read at registration, so a changed flag
changes every policy and note it decides), and their registration, with the device rules this
provider lends (engine/registry.py: local VJP rules and Adam reach these kernels through it)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from engine.capsule import KernelCapsule, KernelHandler, standard_capsule
from engine.providers.native_cuda import (attention, elementwise, flash_attention, fused, index,
                                          loss, norm, pool, random, reduce, scan, shape, softmax)
from engine.providers.native_cuda import conv as conv_family
from engine.providers.native_cuda import optim, optim_multi
from engine.providers.native_cuda.decl import KernelDecl
from engine.registry import ADAM_BIAS_TABLE, ADAM_MULTI_TENSOR, ADAM_STEP, ADAM_STEP_TABLE
from engine.runtime import loader
from engine.types import (BackendOp as Op, Contraction, DeclaredBound, Device, NumericalPolicy,
                          Provider, Rounding, RuntimeEntry as Entry, Subnormals, TrustLevel,
                          VJPMode)

FAMILIES = (elementwise, shape, reduce, index, random, softmax, norm, attention, flash_attention,
            scan, pool, conv_family, loss, fused)


def _collect() -> tuple[dict[Op, KernelDecl], tuple[KernelDecl, ...]]:
    """(each op's plain declaration, the variants after them). A variant is a second kernel of an
    op under its own name (`native_cuda.softmax.accurate`, or a declared `name` as
    native_cuda.flash_attention); it needs the op's plain one."""
    table: dict[Op, KernelDecl] = {}
    variants: dict[str, KernelDecl] = {}
    for family in FAMILIES:
        for decl in family.DECLS:
            if decl.variant is not None:
                if decl.capsule_name in variants:
                    raise ValueError(f"native_cuda: variant {decl.capsule_name} is declared twice")
                variants[decl.capsule_name] = decl
            elif decl.op in table:
                raise ValueError(f"native_cuda: {decl.op.label} is declared twice "
                                 f"({family.__name__} and another family)")
            else:
                table[decl.op] = decl
    for name, decl in variants.items():
        if decl.op not in table:
            raise ValueError(f"native_cuda: variant {name} has no plain declaration of "
                             f"{decl.op.label} beside it")
    return table, tuple(variants.values())


# The one plain declaration of each native op, and the variants. The plain ones register first,
# so a profile without a variant preference plans the plain capsule.
DECLARATIONS, VARIANTS = _collect()
ALL_DECLARATIONS: tuple[KernelDecl, ...] = (*DECLARATIONS.values(), *VARIANTS)


@dataclass(frozen=True)
class CompileFlags:
    """What NVRTC's options fix about float arithmetic."""
    ftz: bool           # subnormal float32 inputs and results flushed to zero
    fmad: bool          # a*b+c may be contracted into one FMA
    prec_div: bool      # float32 division and reciprocal correctly rounded
    prec_sqrt: bool     # float32 square root correctly rounded
    fast_math: bool     # --use_fast_math: intrinsics replace the libdevice functions


_FLAG = re.compile(r"--?(ftz|fmad|prec-div|prec-sqrt)=(true|false)")


def compile_flags(options: tuple[str, ...] | None = None) -> CompileFlags:
    """The flags of `options` (default: loader.OPTIONS now). Unnamed flags take NVRTC's
    documented defaults (--ftz=false --fmad=true --prec-div=true --prec-sqrt=true);
    --use_fast_math forces ftz, fmad and approximate division and square root."""
    opts = loader.OPTIONS if options is None else options
    value = {"ftz": False, "fmad": True, "prec-div": True, "prec-sqrt": True}
    for option in opts:
        m = _FLAG.fullmatch(option)
        if m:
            value[m.group(1)] = m.group(2) == "true"
    fast = any(o.lstrip("-") == "use_fast_math" for o in opts)
    if fast:
        value.update({"ftz": True, "fmad": True, "prec-div": False, "prec-sqrt": False})
    return CompileFlags(value["ftz"], value["fmad"], value["prec-div"], value["prec-sqrt"], fast)


def numerical_policy_for(decl: KernelDecl, flags: CompileFlags) -> NumericalPolicy:
    # A result that is a copy, a selection or a bit pattern is rounded by nothing.
    correctly_rounded = decl.exact or (flags.prec_div and flags.prec_sqrt)
    rounding = Rounding.nearest_even if correctly_rounded else Rounding.implementation_defined
    if decl.atomics and not flags.ftz:
        # Default mode's float atomicAdd (PTX atom.add.f32) flushes subnormal inputs and results
        # whatever --ftz says; deterministic mode's ordinary adds keep them. One policy for both.
        subnormals = Subnormals.implementation_defined
    else:   # float64 row kernels too: double never flushes, the final float rounding obeys --ftz
        subnormals = Subnormals.flush_to_zero if flags.ftz else Subnormals.gradual_underflow
    if decl.exact:
        contraction = Contraction.not_applicable
    elif decl.contraction is not None:   # explicit fmaf in the source, whatever --fmad says
        contraction = decl.contraction
    else:   # libdevice's internal FMAs are part of its declared bound, not of this field
        contraction = Contraction.implementation_defined if flags.fmad else Contraction.separate
    return NumericalPolicy(rounding, subnormals, contraction, decl.reduction)


_GUIDE = ("CUDA C++ Programming Guide, Mathematical Functions appendix, single-precision table: "
          "maximum ulp error against the correctly rounded result, full range")


_INTRINSICS = ("CUDA C++ Programming Guide, Mathematical Functions appendix, intrinsic functions "
               "(what --use_fast_math puts in place of the libdevice function)")
_SIN_COS_FAST = ("absolute error 2^-21.41 for x in [-pi, pi] and undocumented outside; the only "
                 "bound that holds for every x is the function's range [-1, 1]: absolute 2")
# What each libdevice function becomes under --use_fast_math (nvcc -use_fast_math -ptx shows
# ex2.approx, lg2.approx, sin.approx, cos.approx and tanh.approx), and the bound its documented
# error gives, measured as the harness measures a declared bound (from the rounded reference: the
# extra 1 ulp covers the reference's own rounding where the guide states an absolute or relative
# error against the exact value).
FAST_MATH_BOUNDS = {
    "expf": DeclaredBound(106.0, f"__expf (--use_fast_math): 2 + floor(|1.173 x|) ulp "
                                 f"({_INTRINSICS}); largest where the result is a normal float "
                                 "(|x| <= 88.73): 106"),
    "logf": DeclaredBound(3.0, f"__logf (--use_fast_math): 3 ulp outside [0.5, 2], absolute error "
                               f"2^-21.41 inside ({_INTRINSICS})", absolute=2.0 ** -21.41),
    "sinf": DeclaredBound(1.0, f"__sinf (--use_fast_math): {_SIN_COS_FAST} ({_INTRINSICS})",
                          absolute=2.0),
    "cosf": DeclaredBound(1.0, f"__cosf (--use_fast_math): {_SIN_COS_FAST} ({_INTRINSICS})",
                          absolute=2.0),
    "tanhf": DeclaredBound(1.0, f"__tanhf (--use_fast_math, PTX tanh.approx.f32): relative error "
                                f"2^-10.987 ({_INTRINSICS}): 8265 u of |tanh x|",
                           magnitude_units=8265.0),
}


def elementary_ulps_declared(options: tuple[str, ...] | None = None) -> float:
    """The ulps within which the float32 elementary functions of the composite kernels are
    declared (each capsule's elementary_ulps; conformance's derived rules read it): libdevice's 2
    (conformance/error_terms.py), or under --use_fast_math __expf's FAST_MATH_BOUNDS figure, expf
    being the only one those kernels call (tests/test_fast_math_models.py checks the sources).
    `options` default to what register_all declares."""
    opts = tuple(loader.DECLARED_OPTIONS or loader.OPTIONS) if options is None else options
    return FAST_MATH_BOUNDS["expf"].ulps if compile_flags(opts).fast_math else 2.0


def declared_bound(decl: KernelDecl, flags: CompileFlags) -> DeclaredBound | None:
    if decl.libdevice is None:
        return decl.fast_math_bound if flags.fast_math and decl.fast_math_bound else decl.bound
    fn, ulps = decl.libdevice
    if flags.fast_math:
        return FAST_MATH_BOUNDS[fn]
    return DeclaredBound(ulps, f"libdevice {fn}: {int(ulps)} ulp ({_GUIDE}); not fast-math (no "
                               f"__{fn[:-1]}f intrinsic); libdevice's internal FMAs are part of "
                               "that bound")


_F64_VJP = ("VJP evaluated in float64 from the input and rounded once: within 1 ulp of the "
            "rounded exact g * f'(a)")
_DETERMINISTIC = ("deterministic mode (TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS) replaces every "
                  "atomic accumulation with a fixed-order kernel that")
_ATOMIC_KEEPS = ("subnormal=implementation-defined: default mode's float atomicAdd (PTX "
                 f"atom.add.f32) flushes subnormal inputs and results, {_DETERMINISTIC} keeps "
                 "them and repeats bit for bit")
_ATOMIC_FLUSHES = ("subnormal=flush-to-zero: default mode's float atomicAdd (PTX atom.add.f32) "
                   "flushes subnormal inputs and results, and under --ftz=true so do "
                   f"deterministic mode's adds; {_DETERMINISTIC} repeats bit for bit")
_FAST_ELEMENTARY = ("float32 elementary functions are --use_fast_math's intrinsics: derived bounds take "
                    "them within 106 ulp (__expf's 2 + floor(1.173 |x|) where the result is "
                    "normal; expf is the only one a float32 composite kernel calls)")
_ROWS = ("forward and VJP in float64 with fixed-order sums (bitwise repeatable on one GPU "
         "model), rounded once to float32")


def notes(decl: KernelDecl, options: tuple[str, ...], flags: CompileFlags,
          compiled: tuple[str, ...] | None = None) -> str:
    if compiled is None or tuple(compiled) == tuple(options):
        parts = [f"compiled with {' '.join(options)}"]
    else:   # the flag matrix's default-policy judgement: say what really ran
        parts = [f"policy declared for {' '.join(options)} while compiled with "
                 f"{' '.join(compiled)} (TORCHLEAN_NVRTC_DECLARED_FLAG_SET: the compile-flag "
                 "matrix's judgement against another build's policy)"]
    if decl.f64_vjp:
        parts.append(_F64_VJP)
    if decl.atomics:
        parts.append(_ATOMIC_FLUSHES if flags.ftz else _ATOMIC_KEEPS)
    if decl.f64_rows:
        parts.append(_ROWS)
    if flags.fast_math:
        parts.append(_FAST_ELEMENTARY)
    return "; ".join(parts + list(decl.notes))


def capsule(decl: KernelDecl, options: tuple[str, ...] | None = None,
            compiled: tuple[str, ...] | None = None) -> KernelCapsule:
    """The capsule of `decl` declaring the policy of `options` (default: loader.OPTIONS), with
    `compiled` (default: the same) named in its notes as what the kernels were built with."""
    options = tuple(loader.OPTIONS if options is None else options)
    flags = compile_flags(options)
    src = decl.source
    cap = standard_capsule(
        decl.op, Provider.native_cuda, Device.cuda, trust=TrustLevel.checked,
        vjp_mode=VJPMode.backend_vjp if decl.vjp is not None else VJPMode.none,
        policy=numerical_policy_for(decl, flags), source_file=src.path, native_symbol=src.symbols,
        value_summary=decl.summary, declared_bound=declared_bound(decl, flags),
        notes=notes(decl, options, flags, compiled), name=decl.capsule_name,
        variant=decl.variant)
    return dataclasses.replace(cap, elementary_ulps=elementary_ulps_declared(options))


def handlers() -> dict[str, tuple]:
    return {d.capsule_name: (d.forward, d.vjp) for d in ALL_DECLARATIONS}


# What this provider lends through the registry (engine/registry.py) to code that must not import
# it: the local VJP rules of engine/ops/ run these on CUDA (a tape capsule's gradient on our
# kernels, with our flags), engine/optim.py's Adam its native steps.
DEVICE_RULES = {
    Op.max_pool: pool.max_pool_vjp,
    Op.avg_pool: pool.avg_pool_vjp,
    Op.smooth_max_pool: pool.smooth_max_pool_vjp,
    Op.conv: conv_family.conv_vjp,
    Op.conv_transpose: conv_family.conv_transpose_vjp,
    Op.selective_scan: scan.scan_vjp,
    Entry.cross_entropy: loss.cross_entropy_vjp,
    Entry.bias_gelu: fused.bias_gelu_vjp,
    ADAM_STEP: optim.native_adam_step,
    ADAM_STEP_TABLE: optim.native_adam_step_table,
    ADAM_BIAS_TABLE: optim.BiasTable,
    ADAM_MULTI_TENSOR: optim_multi.MultiTensorTable,
}


def register_all(reg) -> None:
    # The compiled options, unless the flag matrix asks for another set's declarations
    # (engine/runtime/flag_sets.py, DECLARED_FLAG_SET_ENV).
    options = tuple(loader.DECLARED_OPTIONS or loader.OPTIONS)
    for decl in ALL_DECLARATIONS:
        cap = capsule(decl, options, tuple(loader.OPTIONS))
        reg.register(cap, KernelHandler(cap.name, decl.op, Provider.native_cuda, Device.cuda,
                                        decl.forward, decl.vjp, declines=decl.declines))
    for key, fn in DEVICE_RULES.items():
        reg.provide(key, fn)
