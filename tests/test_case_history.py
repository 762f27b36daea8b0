"""Call history (issue 35, class 2): every case has a sibling (the same shapes, params and input
offsets, new values from its own stream, a new cotangent), and the campaign calls the kernel on it
right after the case itself and judges it in full; a quick campaign primes instead (the sibling's
values first, unjudged, then the judged case) for all but its small edge cases."""
import numpy as np
import pytest

from conformance import generators
from conformance.campaign import CASE, PRIMER, QUICK_SIBLING_ELEMENTS, SIBLING, Settings, \
    campaign_plan, run_campaign
from engine.capsule import KernelHandler, standard_capsule
from engine.providers.reference import FORWARD, ROUNDED
from engine.types import BackendOp as Op, Device, Provider, TrustLevel, VJPMode


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(np.asarray(a).view(np.uint32),
                                                 np.asarray(b).view(np.uint32))


@pytest.mark.parametrize("op, cls, index", [
    (Op.add, "normal", 0), (Op.matmul, "shapes", 1), (Op.layer_norm, "cancellation", 0),
    (Op.hard_masked_softmax, "masks", 1), (Op.gather, "indices", 0), (Op.reduce_sum, "edges", 7),
    (Op.softmax, "edges", 3), (Op.concat, generators.MISALIGNED, 1), (Op.max_pool, "edges", 5),
    (Op.selective_scan, "special", 0),
])
def test_a_sibling_has_its_cases_shapes_params_and_offsets_and_new_values(op, cls, index):
    case = generators.draw_case(op, 0, cls, index)
    sibling = generators.draw_sibling(op, 0, cls, index)
    assert [x.shape for x in sibling.inputs] == [x.shape for x in case.inputs]
    assert sibling.offsets == case.offsets
    assert sibling.params.keys() == case.params.keys()
    for k, v in case.params.items():
        assert np.array_equal(np.asarray(sibling.params[k]), np.asarray(v)), k
    assert any(x.size and not _same_bits(x, y) for x, y in zip(case.inputs, sibling.inputs))
    assert sibling.note.startswith(f"sibling of {cls}[{index}]") and case.note == ""
    again = generators.draw_sibling(op, 0, cls, index)      # reproducible
    assert all(_same_bits(x, y) for x, y in zip(again.inputs, sibling.inputs))


def test_edge_siblings_keep_their_shapes_for_every_seed_and_seeded_ones_do_not():
    # the edge set's shapes are fixed; its values, the siblings' too, come from the run's seed
    a, b = (generators.draw_sibling(Op.exp, s, "edges", 9) for s in (0, 5))
    assert a.inputs[0].shape == b.inputs[0].shape and not _same_bits(a.inputs[0], b.inputs[0])
    a, b = (generators.draw_sibling(Op.exp, s, "normal", 0) for s in (0, 5))
    assert not (a.inputs[0].shape == b.inputs[0].shape and _same_bits(a.inputs[0], b.inputs[0]))


def test_drawing_a_sibling_leaves_the_case_stream_alone():
    before = generators.draw_case(Op.softmax, 2, "special", 1)
    generators.draw_sibling(Op.softmax, 2, "special", 1)
    after = generators.draw_case(Op.softmax, 2, "special", 1)
    assert all(_same_bits(x, y) for x, y in zip(before.inputs, after.inputs))


def test_a_random_ops_sibling_draws_another_seed():
    case = generators.draw_case(Op.rand_uniform, 0, "edges", 4)
    sibling = generators.draw_sibling(Op.rand_uniform, 0, "edges", 4)
    assert sibling.params["shape"] == case.params["shape"]
    assert sibling.params["seed"] != case.params["seed"]


def test_the_siblings_cotangent_has_the_cases_shape_and_other_values():
    g = generators.cotangent_for(Op.mul, 0, "normal", 0, (5, 7))
    h = generators.sibling_cotangent(Op.mul, 0, "normal", 0, (5, 7))
    assert h.shape == g.shape and not np.array_equal(g, h)


@pytest.mark.parametrize("quick", (False, True))
def test_the_plan_follows_every_case_with_its_sibling_or_primes_it(quick):
    """Every case is judged once. A full campaign judges a sibling right after each; a quick one
    only after the edge cases up to QUICK_SIBLING_ELEMENTS, and calls the kernel on the
    sibling's values first, unjudged, for every other case."""
    op = Op.layer_norm
    settings = Settings(cases=2, quick=quick)
    plan = campaign_plan(op, generators.classes_for(op), settings)
    cases = [(c, i) for c, i, kind in plan if kind == CASE]
    assert cases == [(c, i) for c in generators.classes_for(op)
                     for i in range(generators.class_size(op, c, 2))]
    for k, (cls, i, kind) in enumerate(plan):
        if kind == SIBLING:
            assert plan[k - 1] == (cls, i, CASE)
        if kind == PRIMER:
            assert plan[k + 1] == (cls, i, CASE)
    primed = [(c, i) for c, i, kind in plan if kind == PRIMER]
    judged = [(c, i) for c, i, kind in plan if kind == SIBLING]
    small = [(generators.EDGES, i) for i in range(len(generators.edge_set(op)))
             if generators.edge_elements(op, i) <= QUICK_SIBLING_ELEMENTS]
    assert 0 < len(small) < len(generators.edge_set(op))
    assert judged == (small if quick else cases)
    assert sorted(primed + judged) == sorted(cases)


def test_a_primed_case_meets_the_primers_values_first(monkeypatch):
    """A quick campaign's primer: the kernel (and its VJP) runs on the sibling's values, then the
    case is judged; the primer itself is not a judged case."""
    from conformance import campaign as C
    monkeypatch.setattr(C, "QUICK_SIBLING_ELEMENTS", 40)
    calls = []

    def recording(a, alpha):
        calls.append(("forward", a.shape, a.copy()))
        return FORWARD[Op.scale](a, alpha=alpha)

    def vjp(inputs, out, g, alpha):
        calls.append(("vjp", g.shape, g.copy()))
        return (FORWARD[Op.scale](g, alpha=alpha),)

    cap, handler = _capsule(Op.scale, recording, vjp)
    with np.errstate(all="ignore"):
        result = run_campaign(cap, handler, Settings(cases=2, quick=True), only=("edges",))
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])
    n_edges = len(generators.edge_set(Op.scale))
    big = [i for i in range(n_edges) if generators.edge_elements(Op.scale, i) > 40]
    assert result["cases"]["by_class"]["edges"]["run"] == 2 * n_edges - len(big)
    first = generators.edge_set(Op.scale)[big[-1]].shapes[0]
    at_shape = [c for c in calls if c[0] == "forward" and c[1] == first]
    primer, case = generators.draw_sibling(Op.scale, 0, "edges", big[-1]), \
        generators.draw_case(Op.scale, 0, "edges", big[-1])
    assert [_same_bits(c[2], primer.inputs[0]) for c in at_shape] == [True, False, False]
    assert _same_bits(at_shape[1][2], case.inputs[0])
    assert sum(1 for c in calls if c[0] == "vjp" and c[1] == first) == 2


def _capsule(op, forward, vjp=None):
    cap = standard_capsule(op, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.backend_vjp if vjp else VJPMode.torchlean_tape,
                           policy=ROUNDED, source_file="tests/test_case_history.py",
                           name="test.recording")
    return cap, KernelHandler(cap.name, op, Provider.custom_chip, Device.cpu, forward, vjp)


def test_the_kernel_meets_the_sibling_right_after_its_case():
    """A recording kernel: each sibling call comes right after a call with the same shapes and
    params (the case's own two calls), with other values."""
    calls = []

    def recording(a, alpha):
        calls.append((a.shape, alpha, a.copy()))
        return FORWARD[Op.scale](a, alpha=alpha)

    cap, handler = _capsule(Op.scale, recording)
    settings = Settings(cases=2, seed=1)
    with np.errstate(all="ignore"):
        result = run_campaign(cap, handler, settings, only=("normal", "shapes", "special"))
    assert result["status"] == "passed", result["failure_reasons"]
    # per case: the judged call, the repeat, then the sibling's one call
    assert len(calls) == 3 * 2 * 3 == 2 * result["cases"]["total"] - result["cases"]["total"] // 2
    for k in range(0, len(calls), 3):
        (s0, p0, v0), (s1, p1, v1), (s2, p2, v2) = calls[k: k + 3]
        assert s0 == s1 == s2 and p0 == p1 == p2
        assert _same_bits(v0, v1)
        assert v2.size == 0 or not _same_bits(v0, v2)
