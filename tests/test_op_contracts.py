"""Open op contracts (issue 37): everything the harness knows about an op is its record, an OpSpec
in conformance/families/<family>.py holding callables, and the harness's shared mechanisms
(generators, shrinking, edges, layouts, samplers) name no op.

The demonstration: `abs`'s record written again from scratch, with nothing but the shared
mechanisms and what docs/ADDING_AN_OP.md tells a new op's author to write, collected by the
registry from a family module of its own and put in the place of abs's record. The harness draws
from it byte for byte the cases of the committed case digests, its guard cases are the committed
ones, and the campaign passes the reference capsule on it."""
import importlib.util
import json
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conformance import families, generators
from conformance.edges import MIXED, Edge, flat_shapes
from conformance.families.spec import OpSpec, unary
from conformance.focus import ELEMENTWISE
from conformance.layouts import unary_layout
from engine.types import BackendOp as Op, RuntimeEntry as Entry

REPO = Path(__file__).resolve().parent.parent
DIGESTS = json.loads((REPO / "fixtures" / "case_digests.json").read_text())

# the shared mechanisms: no branch on an op, no op's name (docs/ADDING_AN_OP.md: a new op touches
# none of them). guards.py's cases about no single op call sample ops, and are not in this list.
SHARED = ("generators.py", "shrink.py", "edges.py", "layouts.py", "samplers.py", "focus.py",
          "failures.py", "determinism.py", "error_models.py", "order_claims.py")


def _abs_from_scratch() -> OpSpec:
    """abs's record as a new op's author writes it in families/elementwise.py: its layout (the
    shared unary one), its edge set (the elementwise shapes, mixed values), no cancellation class
    of its own, what a failing element reads, its guard cases (the next free unary position) and
    its place in the catalogue and the run summary."""
    return OpSpec(Op.abs, unary_layout,
                  lambda: [Edge((s,), (), MIXED) for s in flat_shapes()],
                  catalogue=6, cancellation=None, focus=ELEMENTWISE,
                  error_inputs=unary(0, Op.abs), summary_group="elementwise")


@pytest.fixture
def scratch_registry(monkeypatch):
    """The harness with abs's scratch record, collected from a family module of its own, in the
    place of the committed one (every module reads the one OP_SPECS table)."""
    spec = _abs_from_scratch()
    module = SimpleNamespace(__name__="scratch.elementwise", SPECS=(spec,))
    assert families._collect((module,)) == (spec,)
    monkeypatch.setitem(families.OP_SPECS, Op.abs, spec)
    assert generators.OP_SPECS[Op.abs] is spec
    generators.edge_set.cache_clear()
    yield spec
    generators.edge_set.cache_clear()


def _digest_script():
    if np.__version__ != DIGESTS["numpy"]:
        pytest.skip(f"case digests are pinned for numpy {DIGESTS['numpy']}; this is {np.__version__}")
    spec = importlib.util.spec_from_file_location("case_digest", REPO / "scripts" / "case_digest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_record_written_from_scratch_draws_the_committed_cases(scratch_registry):
    digest = _digest_script()
    assert digest.op_digests(Op.abs, DIGESTS["seeds"], DIGESTS["cases"]) == \
        DIGESTS["campaign"]["abs"]


def test_a_record_written_from_scratch_gives_the_committed_guard_cases(scratch_registry):
    import hashlib
    digest = _digest_script()
    h = hashlib.sha256()
    for e in scratch_registry.error_inputs:
        digest._feed(h, (e.rank, e.name, e.check, e.error.__name__, e.message))
    assert h.hexdigest() == DIGESTS["guards"]["abs"]


def test_the_campaign_judges_a_record_written_from_scratch_as_the_committed_one(monkeypatch):
    from conformance.campaign import Settings, run_campaign
    from engine.registry import registry
    cap, handler = registry().get("reference.abs")

    def campaign():
        generators.edge_set.cache_clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            record = run_campaign(cap, handler, Settings.for_run(2, 0, True))
        return record["status"], record["cases"], record["stats"], record["observed"]
    committed = campaign()
    monkeypatch.setitem(families.OP_SPECS, Op.abs, _abs_from_scratch())
    scratch = campaign()
    generators.edge_set.cache_clear()
    assert scratch[0] == "passed" and scratch[1]["failed"] == 0
    assert scratch[1]["by_class"] == committed[1]["by_class"]
    assert scratch[2] == committed[2] and scratch[3] == committed[3]


@pytest.mark.parametrize("spec", families.SPECS, ids=lambda s: s.op.label)
def test_every_callable_of_a_record_is_its_family_s_or_a_shared_mechanism(spec):
    """What an op's record holds is its own family module's code or a shared mechanism's: no
    record reaches into a table of another module kept for it."""
    family = next(f for f in families.FAMILIES if spec in f.SPECS).__name__
    own = {family, "conformance.families.spec", "conformance.families.attention"}  # heads reuse
    shared = {"conformance.layouts", "conformance.samplers", "conformance.edges",
              "conformance.focus", "conformance.orders", "conformance.exact_cases",
              "conformance.bad_inputs"}
    for name in ("layout", "edges", "cancellation", "values", "param_values", "terms"):
        fn = getattr(spec, name)
        if fn is not None:
            assert fn.__module__ in own | shared, (spec.op.label, name, fn.__module__)
    for rule in (spec.forward_rule, spec.vjp_rule,
                 *(r for c in spec.capsule_rules for r in (c.forward, c.vjp))):
        if rule is not None:
            assert rule.bound.__module__ in own, (spec.op.label, rule.bound.__module__)


def test_the_shared_mechanisms_name_no_op():
    """generators.py, shrink.py, edges.py, layouts.py, samplers.py and the modules that read the
    records hold no branch on an op: no `Op.x` or `Entry.x`, no op's name as a string."""
    names = {op.label for op in (*Op, *Entry)} - {"softmax"}   # "softmax": an edge fill kind
    for file in SHARED:
        text = (REPO / "conformance" / file).read_text()
        code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
        assert not re.search(r"\b(Op|Entry|BackendOp|RuntimeEntry)\.[a-z]", code), file
        quoted = set(re.findall(r"[\"']([a-z_]+)[\"']", code)) & names
        assert not quoted, (file, quoted)
