"""One record per op (conformance/families/): every op the reference provider implements has exactly
one OpSpec, in the family module named as its engine wrapper's, the harness's per-op lists are
derived from the records, and every record's fields are consistent with the modules that read
them."""
import math
import re

import numpy as np
import pytest

from conformance import (bad_inputs, determinism, edges, families, generators, guards, orders,
                         error_models, references)
from conformance.families import OP_SPECS, SPECS
from conformance.families.spec import CapsuleRules
from conformance.focus import DOT, FOCI, Focus, REDUCED, ROW
from engine.providers.reference import FORWARD
from engine.registry import registry
from engine.types import BackendOp as Op, RuntimeEntry as Entry

IDS = [s.op.label for s in SPECS]


def test_every_op_with_a_reference_provider_entry_has_exactly_one_record():
    ops = [s.op for s in SPECS]
    assert len(ops) == len(set(ops))
    assert set(ops) == set(FORWARD)
    assert OP_SPECS == {s.op: s for s in SPECS}


def test_each_record_sits_in_the_family_module_of_its_engine_wrapper():
    """families/<family>.py holds the records of the ops whose wrappers engine/ops/<family>.py
    defines, and the registry collects every family module of engine/ops/."""
    import engine.ops as engine_ops
    wrapper_family = {}
    for module in engine_ops._FAMILIES:
        for op in (*Op, *Entry):
            if callable(getattr(module, engine_ops._SPELLED.get(op.label, op.label), None)):
                wrapper_family[op] = module.__name__.rsplit(".", 1)[-1]
    got = {s.op: f.__name__.rsplit(".", 1)[-1] for f in families.FAMILIES for s in f.SPECS}
    assert got == {op: wrapper_family[op] for op in got}
    assert sorted(f.__name__.rsplit(".", 1)[-1] for f in families.FAMILIES) == \
        sorted(m.__name__.rsplit(".", 1)[-1] for m in engine_ops._FAMILIES)


def test_the_catalogue_is_the_records_in_their_catalogue_order():
    places = [s.catalogue for s in SPECS]
    assert places == sorted(places) and len(set(places)) == len(places)
    assert places == list(range(len(SPECS)))


def test_the_reference_registry_is_derived_from_the_records():
    assert references.OPS == tuple(s.op.label for s in SPECS)
    for spec in SPECS:
        module = references.get(spec.op.label)
        assert module.__name__ == f"conformance.references.{spec.reference}"
        assert callable(module.forward)


def test_the_generators_draw_from_the_records():
    assert generators.OP_SPECS is OP_SPECS
    for spec in SPECS:
        classes = generators.classes_for(spec.op)
        assert classes[0] == generators.EDGES
        assert set(spec.extra_classes) <= set(classes)
        assert ("empty" in classes) == spec.allows_empty


def test_the_guard_suites_per_op_cases_are_the_records_error_inputs_in_rank_order():
    inputs = sorted((e for s in SPECS for e in s.error_inputs), key=lambda e: e.rank)
    cases = guards.guard_cases()
    per_op = cases[:len(inputs)]
    assert [(c.name, c.check, c.error, c.message) for c in per_op] == \
        [(e.name, e.check, e.error, e.message) for e in inputs]
    assert all(c.launches_allowed == 0 for c in per_op)
    # what follows is about no single op: no record's case is left in guards.py as well
    rest = {c.name for c in cases[len(inputs):]}
    assert rest and not rest & {e.name for e in inputs}
    ranks = [e.rank for e in inputs]
    assert len(ranks) == len(set(ranks))


def test_the_determinism_audit_cases_are_the_records_cases():
    want = {s.op for s in SPECS if s.determinism}
    cases = determinism.audit_cases(np.random.default_rng(0))
    assert set(cases) == want
    turns = [s.determinism.turn for s in SPECS if s.determinism]
    assert sorted(turns) == list(range(len(turns)))
    for op, (inputs, params, out_shape) in cases.items():
        assert all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in inputs)
        assert isinstance(params, dict) and isinstance(out_shape, tuple)


def test_the_error_models_facts_come_from_the_records():
    for s in SPECS:
        assert error_models.products_of(s.op) is s.products
        assert error_models.extra_roundings_of(s.op) == s.extra_roundings
        assert error_models.divides_sum(s.op) is s.divides_sum
        assert error_models.exact_sums_of(s.op) is s.exact_sums
    for spec in SPECS:
        assert spec.forward_rule is families.FORWARD_RULES.get(spec.op)
        assert spec.vjp_rule is families.VJP_RULES.get(spec.op)
        for own in spec.capsule_rules:
            # a capsule of this op, registered (its rules are found by its name)
            assert isinstance(own, CapsuleRules) and registry().get(own.capsule)[0].op is spec.op
            assert families.rule_for(spec.op, own.capsule) is (own.forward or spec.forward_rule)
            assert families.rule_for(spec.op, own.capsule, vjp=True) is (own.vjp or spec.vjp_rule)
    # every derived rule belongs to an op with a record
    assert set(families.FORWARD_RULES) | set(families.VJP_RULES) <= set(OP_SPECS)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_each_error_input_names_an_exception_and_a_regex_that_compiles(spec):
    label = "attention" if spec.op is Op.scaled_dot_product_attention else spec.op.label
    for e in spec.error_inputs:
        assert isinstance(e.error, type) and issubclass(e.error, Exception), e.name
        re.compile(e.message)
        assert e.name.startswith(f"{label}: ") and e.check and callable(e.call)
        assert e.rank and e.rank[0] in (bad_inputs.UNARY_INPUTS, bad_inputs.BINARY_OPERANDS,
                                        bad_inputs.PARAMETERS)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_each_records_fields_are_consistent(spec):
    assert spec.reference == spec.op.label
    assert set(spec.extra_classes) <= {"params", "masks", "indices"}
    assert spec.domain in ("real", "positive")
    assert spec.cancellation is None or callable(spec.cancellation)
    assert 0 < spec.near_overflow <= float(np.finfo(np.float32).max)
    assert math.isfinite(spec.near_overflow) and 0 < spec.wide_max_exp <= 127
    assert spec.focus is None or spec.focus in FOCI or (
        isinstance(spec.focus, Focus) and spec.focus.name == "group" and callable(spec.focus.smaller))
    assert not spec.halvable or spec.focus in (REDUCED, ROW, DOT)
    assert spec.fixed_order is None or spec.fixed_order in orders.PROGRAMS
    assert callable(spec.terms) and callable(spec.edges) and callable(spec.layout)
    assert spec.extra_roundings >= 0 and (not spec.divides_sum or spec.extra_roundings)
    assert not spec.products or spec.focus in (DOT, None)
    assert spec.determinism is None or callable(spec.determinism.draw)
    assert all(s.scope and s.reason for s in spec.skips)
    shapes, params = spec.layout(np.random.default_rng(0), "normal")
    assert isinstance(shapes, list) and isinstance(params, dict)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.op.label)
def test_each_record_builds_its_edge_set_and_names_its_summary_group(spec):
    assert generators.edge_set(spec.op) == edges.build(spec.edges, spec.takes_inputs)
    assert len(generators.edge_set(spec.op)) >= 15
    assert spec.summary_group in ("elementwise", "softmax family", "reductions", "linear algebra",
                                  "shape and indexing", "random", "norms and attention",
                                  "convolution and pooling")
    assert spec.takes_inputs is (spec.summary_group != "random")


def test_the_summary_groups_ops_by_the_records_summary_group():
    from conformance.cli import throughput_lines
    rec = {"capsule": {"op": "exp"}, "timing": {"seconds": 2.0},
           "cases": {"total": 10, "sizes": {"elements_total": 100}}}
    lines = throughput_lines([rec, {**rec, "capsule": {"op": "matmul"}}])
    assert [ln.split()[0] for ln in lines] == ["elementwise", "linear"]
    assert "5.0 cases/s" in lines[0]
