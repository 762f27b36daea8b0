"""The bad-input suite: every guard trips with its named error, no kernel runs, the session lives."""
import pytest

from conformance import guards
from conformance.guards import run_guards


def test_every_guard_case_is_rejected_on_the_cpu():
    report = run_guards("cpu")
    failures = [(o.name, o.problem) for o in report.outcomes if not o.passed]
    assert failures == []
    assert report.tried >= 100 and report.rejected == report.tried
    assert report.known_op_ok and report.passed
    checks = {o.check for o in report.outcomes}
    assert {"session targets the device", "flat lengths match logical shapes",
            "every axis fits UInt32", "element count fits UInt32", "strides contiguous",
            "axes in range", "supported rank", "output seeds pass AnyBuffer.validate",
            "supplied gradients pass AnyBuffer.validate", "output length checked after the call",
            "the capsule implements the op"} <= checks


def test_the_suite_catches_a_missing_guard(monkeypatch):
    """A runtime with its UInt32 check removed must fail the suite, for the right cases."""
    import engine.ops._dispatch as dispatch
    monkeypatch.setattr(dispatch, "check_uint32", lambda shape, what: None)
    report = run_guards("cpu")
    failed = {o.name for o in report.outcomes if not o.passed}
    assert "relu: extent 2^32" in failed and "exp: extent 2^32" in failed
    assert not report.passed


def test_the_suite_catches_a_launch_before_the_check(monkeypatch):
    """A wrapper that calls its kernel before validating must be caught by the launch count."""
    import engine.ops._dispatch as dispatch
    real_apply = dispatch.apply

    def launch_first(op, inputs, out_shape, params=None, kernel=None):
        from engine.session import current_session
        if inputs and all(t.buffer.count == t.size for t in inputs):
            try:
                current_session().kernel_for(op).handler.forward(
                    *(t.buffer.data[:1] for t in inputs), **(params or {}))
            except Exception:
                pass
        return real_apply(op, inputs, out_shape, params, kernel)
    import sys
    for module in ("elementwise", "reduction", "softmax"):
        # sys.modules: `engine.ops.softmax` the attribute is the op, not the module.
        monkeypatch.setattr(sys.modules[f"engine.ops.{module}"], "apply", launch_first)
    report = run_guards("cpu")
    assert any("kernel launch(es) before the error" in o.problem for o in report.outcomes)


@pytest.mark.cuda
def test_every_guard_case_is_rejected_on_cuda():
    report = run_guards("cuda")
    assert [(o.name, o.problem) for o in report.outcomes if not o.passed] == []
    assert report.tried >= 100 and report.known_op_ok


def test_case_names_are_unique():
    names = [c.name for c in guards.guard_cases()]
    assert len(names) == len(set(names))
