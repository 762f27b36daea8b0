"""One declaration per kernel: each native-cuda op is declared once, next to its handlers; the
source map and the capsules are views of those declarations; a capsule's policy follows the
compile flags the loader passes; the reference provider keeps one record per op."""
from collections import Counter

import pytest

from engine import native_sources
from engine.providers import reference
from engine.providers.native_cuda import capsules, optim
from engine.registry import Registry, registry
from engine.runtime import loader
from engine.types import (BackendOp as Op, Contraction, Provider, Reduction, Rounding,
                          Subnormals, VJPMode)


def _native_caps(reg=None) -> dict:
    reg = reg or registry()
    return {c.op: (c, reg.handler(c.name)) for c in reg.capsules()
            if c.provider is Provider.native_cuda and c.variant is None}


def _fresh_native_caps() -> dict:
    reg = Registry()
    capsules.register_all(reg)
    return _native_caps(reg)


def test_each_native_op_has_exactly_one_plain_declaration():
    counts = Counter(d.op for family in capsules.FAMILIES for d in family.DECLS
                     if d.variant is None)
    assert counts and max(counts.values()) == 1, [op for op, n in counts.items() if n > 1]
    assert set(counts) == set(capsules.DECLARATIONS) == set(_native_caps())
    names = [d.capsule_name for d in capsules.ALL_DECLARATIONS]
    assert len(names) == len(set(names))
    for decl in capsules.VARIANTS:
        assert decl.op in capsules.DECLARATIONS
        assert decl.capsule_name == (decl.name or f"native_cuda.{decl.op.label}.{decl.variant}")


def test_declarations_live_with_their_handlers():
    for family in capsules.FAMILIES:
        for decl in family.DECLS:
            assert decl.forward.__module__ == family.__name__, decl.op
            assert decl.vjp is None or decl.vjp.__module__ == family.__name__, decl.op


def test_source_map_is_a_view_of_the_declarations():
    assert set(native_sources.SOURCES) == set(capsules.DECLARATIONS)
    assert native_sources.CAPSULE_SOURCES == {d.capsule_name: d.source
                                              for d in capsules.ALL_DECLARATIONS}
    for op, decl in capsules.DECLARATIONS.items():
        src = native_sources.SOURCES[op]
        assert src == decl.source
        assert src.forward == decl.forward_symbols and src.vjp == decl.vjp_symbols
        assert src.file == decl.file
    assert native_sources.ADAM_STEP is optim.ADAM_STEP


def test_capsules_and_handlers_are_views_of_the_declarations():
    caps = _native_caps()
    assert capsules.handlers() == {d.capsule_name: (d.forward, d.vjp)
                                   for d in capsules.ALL_DECLARATIONS}
    for op, decl in capsules.DECLARATIONS.items():
        cap, handler = caps[op]
        prov = cap.value_contract.provenance
        assert prov.source_file == decl.source.path and prov.native_symbol == decl.source.symbols
        assert cap.name == (decl.name or f"native_cuda.{op.label}")
        assert (handler.forward, handler.vjp, handler.declines) == \
            (decl.forward, decl.vjp, decl.declines)
        assert cap.vjp_mode is (VJPMode.none if decl.vjp is None else VJPMode.backend_vjp)
        if decl.summary:
            assert cap.value_contract.summary == decl.summary
        if decl.libdevice is None:
            assert cap.value_contract.declared_bound == decl.bound
        else:
            fn, ulps = decl.libdevice
            bound = cap.value_contract.declared_bound
            assert bound.ulps == ulps and f"libdevice {fn}" in bound.reason
        policy = cap.numerical_policy
        assert policy.reduction is decl.reduction
        assert (policy.contraction is Contraction.not_applicable) == decl.exact, op
        for note in decl.notes:
            assert note in cap.notes
        assert ("atomicAdd" in cap.notes) == decl.atomics, op


def test_the_policy_follows_the_loader_options(monkeypatch):
    base = _fresh_native_caps()
    flipped = tuple("--ftz=true" if o == "--ftz=false" else
                    "--fmad=true" if o == "--fmad=false" else o for o in loader.OPTIONS)
    assert flipped != loader.OPTIONS
    monkeypatch.setattr(loader, "OPTIONS", flipped)
    after = _fresh_native_caps()
    assert set(after) == set(base)
    for op, (cap, _) in after.items():
        decl = capsules.DECLARATIONS[op]
        was, now = base[op][0].numerical_policy, cap.numerical_policy
        assert f"compiled with {' '.join(flipped)}" in cap.notes
        # --ftz=false kept subnormals (atomics aside); --ftz=true flushes in both modes.
        assert was.subnormals is (Subnormals.implementation_defined if decl.atomics else
                                  Subnormals.gradual_underflow), op
        assert now.subnormals is Subnormals.flush_to_zero, op
        # --fmad=false kept products separate; --fmad=true lets the compiler contract them.
        if decl.exact:
            assert was.contraction is now.contraction is Contraction.not_applicable
        elif decl.contraction is not None:   # explicit fmaf in the source, whatever --fmad says
            assert was.contraction is now.contraction is decl.contraction, op
        else:
            assert was.contraction is Contraction.separate, op
            assert now.contraction is Contraction.implementation_defined, op
        assert now.rounding is was.rounding is Rounding.nearest_even
        assert now.reduction is was.reduction


def test_approximate_division_or_fast_math_withdraws_correct_rounding(monkeypatch):
    monkeypatch.setattr(loader, "OPTIONS", tuple(
        "--prec-div=false" if o == "--prec-div=true" else o for o in loader.OPTIONS))
    caps = _fresh_native_caps()
    assert caps[Op.inv][0].numerical_policy.rounding is Rounding.implementation_defined
    assert caps[Op.relu][0].numerical_policy.rounding is Rounding.nearest_even   # exact
    monkeypatch.setattr(loader, "OPTIONS", loader.OPTIONS + ("--use_fast_math",))
    caps = _fresh_native_caps()
    exp = caps[Op.exp][0]
    # the intrinsics' documented bounds replace libdevice's (capsules.FAST_MATH_BOUNDS)
    assert exp.value_contract.declared_bound.ulps == 106.0
    assert "__expf" in exp.value_contract.declared_bound.reason
    log = caps[Op.log][0].value_contract.declared_bound
    assert (log.ulps, log.absolute) == (3.0, 2.0 ** -21.41)
    for op in (Op.sin, Op.cos):   # undocumented outside [-pi, pi]: only the range's bound
        assert caps[op][0].value_contract.declared_bound.absolute == 2.0
    assert caps[Op.tanh][0].value_contract.declared_bound.magnitude_units == 8265.0
    assert exp.numerical_policy.subnormals is Subnormals.flush_to_zero
    assert exp.numerical_policy.contraction is Contraction.implementation_defined


def test_compile_flags_take_nvrtc_defaults_for_unnamed_options():
    flags = capsules.compile_flags(("-std=c++17",))
    assert (flags.ftz, flags.fmad, flags.prec_div, flags.prec_sqrt) == (False, True, True, True)
    flags = capsules.compile_flags(loader.OPTIONS)
    assert (flags.ftz, flags.fmad, flags.prec_div, flags.prec_sqrt) == (False, False, True, True)


# orders that are fixed, yet not one that conformance/orders.py replays for a declared fixed-left
# or fixed-tree order, so they are declared implementation-defined without atomics
FIXED_ORDERS_WITHOUT_A_PROGRAM = {Op.selective_scan}   # the chunked scan from PARALLEL_MIN_SEQ on


def test_atomic_declarations_declare_an_unspecified_order():
    for decl in capsules.DECLARATIONS.values():
        assert decl.atomics == (decl.reduction is Reduction.implementation_defined) or \
            decl.op in FIXED_ORDERS_WITHOUT_A_PROGRAM and not decl.atomics, decl.op
        assert not (decl.exact and (decl.atomics or decl.f64_rows)), decl.op


def test_the_reference_provider_has_one_record_per_op():
    caps = {c.op: c for c in registry().capsules() if c.provider is Provider.reference}
    assert set(caps) == set(reference.OPS)
    assert reference.FORWARD == {op: e.forward for op, e in reference.OPS.items()}
    for op, entry in reference.OPS.items():
        cap = caps[op]
        assert cap.numerical_policy == entry.policy and cap.vjp_mode is entry.vjp, op
        assert cap.value_contract.declared_bound == entry.bound, op
        if entry.summary:
            assert cap.value_contract.summary == entry.summary, op
        assert registry().handler(cap.name).forward is entry.forward
        assert entry.vjp is (VJPMode.torchlean_tape if op.needs_vjp else VJPMode.none)


@pytest.mark.parametrize("name", ["_broadcast_into", "_KERNELS"])
def test_the_compatibility_aliases_are_gone(name):
    from engine.providers import native_cuda
    assert not hasattr(native_cuda, name)


def test_engine_ops_exports_one_wrapper_per_built_op():
    """engine.ops's exports come from the family modules: every op with a reference entry, under
    its own name, and nothing for the ops BackendOp names but nobody has built."""
    import engine.ops as ops
    from engine.providers.reference import OPS
    assert sorted(ops.OP_NAMES) == sorted(op.label for op in OPS)
    assert set(ops.OP_NAMES) <= set(ops.__all__)
    import engine
    m = ops.max(engine.tensor([1.0, 5.0]), engine.tensor([3.0, 2.0]))
    assert m.numpy().tolist() == [3.0, 5.0]                # the op, not Python's max


def test_tape_sources_are_the_kernels_the_rules_declare():
    from engine.native_sources import TAPE_SOURCES
    from engine.ops._dispatch import TAPE_KERNELS
    from engine.types import BackendOp as Op
    assert set(TAPE_SOURCES) == set(TAPE_KERNELS) and len(TAPE_SOURCES) >= 22
    assert TAPE_SOURCES[Op.exp].file == "tape.cu" and TAPE_SOURCES[Op.exp].vjp == ("tl_tape_exp",)
    assert TAPE_SOURCES[Op.gather].file == "index.cu"     # its rule runs index.cu's ordered scatter
