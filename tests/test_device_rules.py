"""The device rules (engine/registry.py): the CUDA providers lend, when they register, the functions
engine/ops/'s local VJP rules and engine/optim.py's Adam used to import from them; each rule
reaches the function lent under its own key, with its arguments untouched. Runs without CuPy: a
stand-in array whose type lives in a `cupy` module sends a rule down its device path."""
from __future__ import annotations

import subprocess
import sys

import pytest

import engine.ops  # noqa: F401 - registers every local VJP rule
from engine import registry as reg_mod
from engine.ops._dispatch import LOCAL_VJP
from engine.registry import (ADAM_BIAS_TABLE, ADAM_MULTI_TENSOR, ADAM_STEP, ADAM_STEP_TABLE,
                             DuplicateDeviceRuleError, MissingDeviceRuleError, Registry)
from engine.types import BackendOp as Op, RuntimeEntry as Entry


def _lent() -> dict:
    """Each key, and the function its rule imported from the provider before the table: the
    same objects, read from the provider modules' own names."""
    from engine.providers import cufft
    from engine.providers.native_cuda import conv, fused, loss, optim, optim_multi, pool, scan
    return {
        Op.max_pool: pool.max_pool_vjp, Op.avg_pool: pool.avg_pool_vjp,
        Op.smooth_max_pool: pool.smooth_max_pool_vjp, Op.conv: conv.conv_vjp,
        Op.conv_transpose: conv.conv_transpose_vjp, Op.selective_scan: scan.scan_vjp,
        Entry.cross_entropy: loss.cross_entropy_vjp, Entry.bias_gelu: fused.bias_gelu_vjp,
        Entry.rfft: cufft.rfft_vjp, Entry.irfft: cufft.irfft_vjp, Op.fft_fno: cufft.fft_fno_vjp,
        ADAM_STEP: optim.native_adam_step, ADAM_STEP_TABLE: optim.native_adam_step_table,
        ADAM_BIAS_TABLE: optim.BiasTable, ADAM_MULTI_TENSOR: optim_multi.MultiTensorTable,
    }


def test_the_providers_import_without_cupy():
    code = ("import sys, engine.providers.native_cuda, engine.providers.cufft; "
            "assert 'cupy' not in sys.modules, 'cupy imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_registration_lends_the_same_functions_the_rules_imported():
    from engine.providers import cufft, native_cuda
    reg = Registry()
    native_cuda.register_all(reg)
    cufft.register_all(reg)
    want = _lent()
    assert reg.device_rules() == want
    assert all(reg.device_rule(key) is fn for key, fn in want.items())
    # the process-wide registry, which the rules ask, holds the same
    assert all(reg_mod.registry().device_rule(key) is fn for key, fn in want.items())


class _DeviceArray:
    """Stands in for a CuPy array: on_device() reads the type's module."""


_DeviceArray.__module__ = "cupy._stand_in"

# key -> the rule's parameters after (inputs, out, g), and what the lent function is handed
CALLS = {
    Op.max_pool: ({"kernel_size": (2,), "stride": (2,), "padding": (0,), "dilation": (1,)},
                  ((2,), (2,), (0,), (1,))),
    Op.avg_pool: ({"kernel_size": (3,), "stride": (1,), "padding": (1,), "dilation": (1,)},
                  ((3,), (1,), (1,), (1,))),
    Op.smooth_max_pool: ({"kernel_size": (2,), "stride": (2,), "padding": (0,),
                          "dilation": (1,), "beta": 4.0}, ((2,), (2,), (0,), (1,), 4.0)),
    Op.conv: ({"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1},
              ((1,), (0,), (1,), 1)),
    Op.conv_transpose: ({"stride": (2,), "padding": (1,), "dilation": (1,), "groups": 2},
                        ((2,), (1,), (1,), 2)),
    Op.selective_scan: ({}, ()),
    Entry.cross_entropy: ({"targets": "the targets"}, ("the targets",)),
    Entry.bias_gelu: ({}, ()),
    Entry.rfft: ({}, ()),
    Entry.irfft: ({"n": 8}, (8,)),
    Op.fft_fno: ({}, ()),
}


@pytest.mark.parametrize("key", list(CALLS), ids=lambda k: k.label)
def test_each_rule_on_the_device_calls_the_function_lent_for_its_op(key, monkeypatch):
    seen = []
    fake = Registry()
    for other in CALLS:   # every other key lends a function that must not be called
        fake.provide(other, lambda *a, _k=other: pytest.fail(f"{key.label} called {_k.label}"))
    fake._device_rules[key] = lambda *args: seen.append(args) or "result"
    monkeypatch.setattr(reg_mod, "_REGISTRY", fake)
    arity = {Op.selective_scan: 4, Entry.rfft: 1, Entry.irfft: 1, Op.fft_fno: 3}.get(key, 2)
    inputs = tuple(_DeviceArray() for _ in range(arity))
    out, g = _DeviceArray(), _DeviceArray()
    params, passed = CALLS[key]
    assert LOCAL_VJP[key](inputs, out, g, **params) == "result"
    assert len(seen) == 1 and seen[0][:3] == (inputs, out, g) and seen[0][3:] == passed


def test_a_missing_rule_and_a_second_lender_are_named_errors():
    reg = Registry()
    with pytest.raises(MissingDeviceRuleError, match="no registered provider lends a device "
                                                     "rule for `max_pool`"):
        reg.device_rule(Op.max_pool)
    first = _lent()[Op.max_pool]
    reg.provide(Op.max_pool, first)
    reg.provide(Op.max_pool, first)   # the same function again: registering twice is harmless
    with pytest.raises(DuplicateDeviceRuleError, match="device rule `max_pool` is already lent"):
        reg.provide(Op.max_pool, print)
