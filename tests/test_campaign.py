"""Generators, campaigns, shrinking, replay files, isolation of crashing and hanging capsules,
atomic evidence and resume."""
import json
import warnings

import numpy as np
import pytest

from conformance import generators
from conformance.campaign import Settings, check_case, run_campaign
from conformance.runner import Target, run_targets
from conformance.shrink import decode_case, encode_case, shrink
from engine.registry import registry
from engine.types import BackendOp as Op

QUICK = Settings.for_run(None, 0, True).to_json()


def test_a_case_is_reproducible_from_capsule_seed_class_and_index():
    a = generators.draw_case(Op.matmul, 7, "shapes", 3)
    b = generators.draw_case(Op.matmul, 7, "shapes", 3)
    c = generators.draw_case(Op.matmul, 8, "shapes", 3)
    assert a.params == b.params and all(np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                        for x, y in zip(a.inputs, b.inputs))
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a.inputs, c.inputs))


def test_generators_cover_the_edges_the_issue_names():
    seen_extents, ranks, values = set(), set(), np.zeros(0, np.float32)
    for i in range(60):
        for cls in ("shapes", "empty", "subnormal", "special", "signed-zero"):
            case = generators.draw_case(Op.add, 0, cls, i)
            seen_extents |= set(case.inputs[0].shape)
            ranks.add(case.inputs[0].ndim)
            values = np.concatenate([values, case.inputs[0].reshape(-1)[:50]])
    assert {31, 32, 33, 255, 256, 257, 1023, 1025, 0, 1} <= seen_extents
    assert ranks == {0, 1, 2, 3, 4}
    tiny = np.abs(values) < 2.0 ** -126
    assert np.any(tiny & (values != 0)) and np.any(np.isnan(values)) and np.any(np.isinf(values))
    assert np.any((values == 0) & np.signbit(values))


def test_masks_include_fully_blocked_rows_and_all_open():
    kinds = set()
    for i in range(30):
        case = generators.draw_case(Op.hard_masked_softmax, 0,
                                    "masks", i)
        m = np.moveaxis(case.params["mask"], case.params["axis"], -1)
        if m.size and m.all():
            kinds.add("all-open")
        if m.size and m.shape[-1] and (~m.any(axis=-1)).any():
            kinds.add("blocked-row")
    assert kinds == {"all-open", "blocked-row"}


def test_indices_include_duplicates_and_boundaries():
    dup = bound = False
    for i in range(30):
        case = generators.draw_case(Op.gather, 0, "indices", i)
        idx, extent = case.params["indices"], case.inputs[0].shape[case.params["axis"]]
        dup |= len(set(idx.tolist())) < idx.size
        bound |= bool(idx.size) and {0, extent - 1} <= set(idx.tolist())
    assert dup and bound


@pytest.mark.parametrize("name", ["reference.add", "reference.matmul", "reference.sigmoid"])
def test_reference_campaign_passes_and_reports_statistics(name):
    cap, handler = registry().get(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = run_campaign(cap, handler, Settings.for_run(2, 0, True))
    assert result["status"] == "passed", result["failure_reasons"]
    assert result["cases"]["total"] == sum(e["run"] for e in result["cases"]["by_class"].values())
    assert result["vjp_checked"] and result["stats"]["vjp"]["elements"] > 0
    assert result["identity"]["passed"] == 1
    assert 0 <= result["stats"]["forward"]["worst_ratio"] <= 1
    assert result["observed"]["bitwise_repeatable"] is True
    assert result["timing"]["cases_per_second"] > 0


def test_a_failure_names_element_inputs_expected_got_error_and_bound():
    from fixtures.plugins.numpy_kernels import ENTRIES
    entry = ENTRIES[1]   # the naive softplus
    case = generators.Case(Op.softplus, "normal", (np.array([1.0, 100.0], np.float32),), {})
    res = check_case(entry.capsule, entry.handler(), case, {})
    (f,) = [f for f in res.failures if f.output == "value"]
    assert f.element == [1] and f.reason == "inf-mismatch"
    assert f.inputs == {"in0": ["0x42c80000"]} and f.expected == "0x42c80000"
    assert f.got == "0x7f800000" and f.bound is not None and "0x42c80000" in f.line()


def test_shrinking_finds_the_failing_element_and_replays_round_trip():
    from fixtures.plugins.numpy_kernels import ENTRIES
    entry = ENTRIES[1]
    x = np.linspace(-3, 3, 40).astype(np.float32)
    x[17] = 120.0
    case = generators.Case(Op.softplus, "normal", (x.reshape(4, 10),), {})

    def still_fails(c):
        return check_case(entry.capsule, entry.handler(), c, {}).failures or None
    small = shrink(case, still_fails, budget=40)
    assert small.inputs[0].size == 1 and small.inputs[0][0] == np.float32(120.0)
    again = decode_case(json.loads(json.dumps(encode_case(small))))
    assert again.inputs[0].view(np.uint32).tolist() == small.inputs[0].view(np.uint32).tolist()
    assert again.params == small.params and again.op is Op.softplus


def test_crash_and_hang_are_recorded_and_the_rest_go_on(tmp_path):
    spec = "fixtures.plugins.misbehaving:ENTRIES"
    targets = [Target(n, spec) for n in ("user.crashing_abs", "user.hanging_abs",
                                         "user.good_abs")]
    # the timeout covers each capsule's worker and kernel process starting too: 8 s timed out
    # the crashing one on 16 test workers sharing 2 cores; 20 s keeps the hang's cost bounded
    records = run_targets(targets, QUICK, tmp_path, "cpu", jobs=2, timeout_s=20)
    assert [r["status"] for r in records] == ["crashed", "timed-out", "passed"]
    assert "status 3" in records[0]["message"] and "killed" in records[1]["message"]
    assert {p.name for p in tmp_path.glob("*.json")} == {
        "user.crashing_abs.json", "user.hanging_abs.json", "user.good_abs.json"}
    assert not list(tmp_path.glob(".*.tmp"))      # atomic writes leave no temporaries


def test_an_interrupted_run_resumes_without_redoing_finished_capsules(tmp_path):
    targets = [Target("reference.relu"), Target("reference.abs")]
    first = run_targets(targets, QUICK, tmp_path, "cpu", jobs=2, timeout_s=120)
    assert not any(r.get("resumed") for r in first)
    (tmp_path / "reference.abs.json").unlink()               # as if interrupted before it
    second = run_targets(targets, QUICK, tmp_path, "cpu", jobs=2, timeout_s=120)
    assert [bool(r.get("resumed")) for r in second] == [True, False]
    other = dict(QUICK, seed=1)                                # other settings: no reuse
    third = run_targets(targets[:1], other, tmp_path, "cpu", jobs=1, timeout_s=120)
    assert not third[0].get("resumed")


def test_cases_outside_a_declared_support_are_skipped_with_the_reason():
    """A kernel that refuses some shapes by design declares it (KernelHandler.declines): those
    cases are skipped and named, never judged, and the refusal is not counted as support."""
    from engine.capsule import KernelHandler, standard_capsule
    from engine.providers.reference import EXACT
    from engine.types import Device, Provider, TrustLevel, VJPMode

    def relu(a):
        assert a.size <= 1000, "called outside its declared support"
        return np.where((a > 0) | np.isnan(a), a, np.float32(0)).astype(np.float32)

    cap = standard_capsule(Op.relu, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.torchlean_tape, policy=EXACT, source_file="t.py",
                           name="user.small_relu")
    handler = KernelHandler(cap.name, Op.relu, Provider.custom_chip, Device.cpu, relu,
                            declines=lambda inputs, params: "over 1000 elements"
                            if inputs[0].size > 1000 else None)
    result = run_campaign(cap, handler, Settings.for_run(None, 0, True))
    assert result["status"] == "passed", result["failure_reasons"]
    assert result["cases"]["by_class"]["edges"]["skipped"] >= 5
    assert any("outside the capsule's declared support: over 1000 elements" in n
               for n in result["cases"]["skipped_notes"])
