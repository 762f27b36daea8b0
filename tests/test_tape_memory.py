"""The tape keeps what the VJP rules read and nothing else (issue 18): intermediate tensors die
with their last Python reference unless a rule saved their values, backward releases each node's
saved values and each cotangent as it passes, a leaf's gradient is not copied when the tape owns
it (and never shares memory with another's), and a rule that reads an undeclared value fails by
name. The gpt2 accounting (benchmarks/memory_gpt2.py) is checked against PyTorch's saves."""
from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import pytest

from engine import ops, tensor
from engine.errors import UnsavedValueError
from engine.tape_saves import Unsaved, saves, stand_ins


def _leaf(values) -> object:
    return tensor(np.asarray(values, np.float32), requires_grad=True)


def test_values_no_rule_reads_die_with_their_tensor():
    # add, scale and reduce_mean read no values: their inputs need not outlive the forward.
    x = _leaf([1.0, -2.0, 3.0])
    s = ops.add(x, x)
    t = ops.scale(s, 3.0)
    loss = ops.reduce_mean(t)
    refs = [weakref.ref(s), weakref.ref(t), weakref.ref(s.buffer.data)]
    del s, t
    assert [r() for r in refs] == [None, None, None]
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0, np.float32))


def test_saved_values_live_until_their_node_ran():
    x = _leaf([0.5, -1.5, 2.0])
    h = ops.gelu(ops.scale(x, 2.0))     # h is saved by the second gelu
    y = ops.gelu(h)
    loss = ops.reduce_mean(y)
    h_values = weakref.ref(h.buffer.data)
    first, second = h.node, y.node
    del h, y
    assert h_values() is not None       # the second gelu reads it
    seen = {}
    run_second, run_first = second.rule, first.rule

    def second_rule(saved, out, g, **p):
        seen["g of y"] = weakref.ref(g)
        return run_second(saved, out, g, **p)

    def first_rule(saved, out, g, **p):
        # the second gelu's node ran before this one: its saved input and its cotangent are gone
        seen["h when the first ran"] = h_values()
        seen["g of y when the first ran"] = seen["g of y"]()
        return run_first(saved, out, g, **p)
    second.rule, first.rule = second_rule, first_rule
    loss.backward()
    assert seen["h when the first ran"] is None
    assert seen["g of y when the first ran"] is None
    assert first.rule is None and second.rule is None      # freed (no retain_graph)


def test_retain_graph_keeps_saved_values():
    x = _leaf([0.5, -1.5, 2.0])
    h = ops.gelu(ops.scale(x, 2.0))
    loss = ops.reduce_mean(ops.gelu(h))
    h_values = weakref.ref(h.buffer.data)
    del h
    loss.backward(retain_graph=True)
    first = x.grad.numpy()
    assert h_values() is not None
    x.grad = None
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), first)
    assert h_values() is None


def _output_of(node) -> list:
    """Wrap node's rule to record the arrays it returns."""
    got, run = [], node.rule

    def rule(saved, out, g, **p):
        got.extend(run(saved, out, g, **p))
        return tuple(got)
    node.rule = rule
    return got


def test_an_owned_gradient_becomes_the_leafs_grad_without_a_copy():
    a = _leaf(np.arange(6).reshape(2, 3) / 7)
    w = _leaf(np.arange(12).reshape(4, 3) / 5)
    y = ops.matmul(a, w, trans_b=True)
    got = _output_of(y.node)
    ops.reduce_mean(y).backward()
    assert np.shares_memory(a.grad.buffer.data, got[0])
    assert np.shares_memory(w.grad.buffer.data, got[1])


def test_a_shared_gradient_is_copied_into_each_leaf():
    # add's rule returns its cotangent twice: neither leaf may hold it, or each other's
    a, b = _leaf([1.0, 2.0]), _leaf([3.0, 4.0])
    y = ops.add(a, b)
    got = _output_of(y.node)
    y.backward(np.array([0.25, -0.5], np.float32))
    assert got[0] is got[1]
    assert not np.shares_memory(a.grad.buffer.data, b.grad.buffer.data)
    assert not np.shares_memory(a.grad.buffer.data, got[0])
    np.testing.assert_array_equal(a.grad.numpy(), [0.25, -0.5])
    np.testing.assert_array_equal(b.grad.numpy(), [0.25, -0.5])


def test_a_seed_is_never_a_leafs_grad():
    x = _leaf([1.0, 2.0])
    seed = np.array([3.0, 4.0], np.float32)
    x.backward(seed)
    assert not np.shares_memory(x.grad.buffer.data, seed)


def test_an_undeclared_read_is_unsaved_value_error():
    @saves(1)
    def rule(inputs, out, g):
        return g * inputs[0], g * inputs[1]
    a, b = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
    inputs, out = stand_ins(rule, (a, b), a + b)
    assert isinstance(inputs[0], Unsaved) and inputs[1] is b and isinstance(out, Unsaved)
    assert inputs[0].shape == (3,) and inputs[0].ndim == 1 and inputs[0].size == 3
    with pytest.raises(UnsavedValueError,
                       match=r"a VJP rule read the values of its input 0 \(shape \(3,\)\).*"
                             r"add that input \(or output=True\)"):
        rule(inputs, out, np.ones(3, np.float32))
    with pytest.raises(UnsavedValueError, match=r"read `\.data` of its output"):
        out.data


def test_the_harness_hands_a_rule_its_declared_values_only():
    from conformance.kernel_call import KernelRaised, call_vjp
    from engine.types import Device

    @saves()
    def wrong(inputs, out, g):   # declares nothing, reads its input
        return (g * inputs[0],)
    x = np.ones(4, np.float32)
    with pytest.raises(KernelRaised) as info:
        call_vjp(wrong, Device.cpu, (x,), x, x, {}, poison=False)
    assert isinstance(info.value.__cause__, UnsavedValueError)

    @saves(0)
    def right(inputs, out, g):
        return (g * inputs[0],)
    grads, mutated = call_vjp(right, Device.cpu, (x,), x, x * 3, {}, poison=False)
    np.testing.assert_array_equal(grads[0], np.full(4, 3.0, np.float32))
    assert not mutated


def test_gpt2_keeps_what_pytorch_keeps():
    """Per block the tape of flash_cuda keeps PyTorch's saves (layer-norm inputs, linear inputs,
    q, k, v, out, GELU input): attention_heads keeps the projections and its output as they are
    ([B, T, d], the heads read in place, as PyTorch's SDPA reads its views), so neither a merged
    copy of the heads for the output projection nor a mask is kept (the permutes and the mask
    went with it). The fused bias_gelu keeps fc's unbiased product (PyTorch's GELU input less the
    bias: the same bytes) and, its VJP declaring no saves(...), its output, which is proj's
    input: one allocation, counted under bias_gelu, the first op keeping it, and so missing from
    matmul's. Each add_layer_norm (every residual add with the layer norm after it) keeps its
    stacked output, the sum and the normalised rows: PyTorch's layer-norm input and the next
    linear's input, the same bytes, counted under add_layer_norm; layer_norm keeps only the first
    block's ln_1 input, and matmul that ln_1's output."""
    from benchmarks import memory_gpt2
    from engine.models import gpt2
    config = dataclasses.replace(gpt2.preset("tiny"), layers=2)
    b, t = 2, 16
    model, events, loss = memory_gpt2.forward_events(config, b, t)
    ours = memory_gpt2.kept_by_kind(model, events, memory_gpt2.rules_of("flash_cuda"))
    torch = memory_gpt2.torch_kept(config, b, t, config.layers)
    unit = b * t * config.width * 4
    assert torch["gelu"] == config.layers * 4 * unit
    assert ours["bias_gelu"] == torch["gelu"] + config.layers * 4 * unit
    assert ours["matmul"] == torch["matmul"] - config.layers * 4 * unit - 2 * config.layers * unit
    assert ours["matmul"] == unit
    assert ours["attention_heads"] == config.layers * 4 * unit
    assert ours["layer_norm"] == unit   # mean and rstd recomputed
    assert ours["add_layer_norm"] == 2 * config.layers * 2 * unit
    # the same norm inputs and linear inputs as before the fusion, under other names
    assert ours["layer_norm"] + ours["add_layer_norm"] + ours["matmul"] == \
        (2 * config.layers + 1) * unit + torch["matmul"] - config.layers * 4 * unit
    assert ours["cross_entropy"] == b * t * 256 * 4          # the logits (the fused loss)
    assert ours["cross_entropy targets"] == b * t * 8
    assert not ours.get("mask (model cache)")
    assert {k for k, v in ours.items() if v} == {
        "bias_gelu", "matmul", "attention_heads", "layer_norm", "add_layer_norm",
        "cross_entropy", "cross_entropy targets", "gather indices"}
    old = memory_gpt2.kept_by_kind(model, events, None)
    # the old tape (every input and output kept) held 1.24x this at this size with the fused
    # loss, bias_gelu and attention_heads (1.36x with the permutes around attention, whose
    # copies it kept too; 1.72x with add + gelu; 1.8x and more with log_softmax + gather)
    assert sum(old.values()) > 1.2 * sum(ours.values())
    # The replayed backward starts from everything kept; on top come at most the cotangents of
    # the logits and the log-softmax ([B*T, 256] each) or a block's (under 8 units: gelu's and
    # fc's [B*T, 4d] ones).
    peak = memory_gpt2.backward_peak(model, events, memory_gpt2.rules_of("flash_cuda"), loss)
    kept = sum(ours.values())
    assert kept < peak <= kept + max(2 * b * t * 256 * 4, 8 * unit)


def test_nothing_but_the_tape_holds_gpt2_activations():
    from benchmarks import memory_gpt2
    from engine.models import gpt2
    config = dataclasses.replace(gpt2.preset("tiny"), width=128, heads=4)
    live, kept = memory_gpt2.live_after_forward(config, 4, 64)
    assert kept > 4 * 2 ** 20
    # The rest is Python objects (nodes, tuples, stand-ins: under 1 KiB per op), not arrays; the
    # tape before saves(...) held about twice `kept` in arrays.
    assert 0 <= live - kept < 128 * 1024


def test_the_accounting_script_reports_each_kind_and_the_expected_peak(capsys):
    from benchmarks import memory_gpt2
    assert memory_gpt2.main(["--preset", "tiny", "--seq-len", "16", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "gpt2 tiny: B2 T16, 2 layers, width 32, 2 heads" in out
    for kind in ("matmul", "gelu", "layer_norm", "scaled_dot_product_attention", "total"):
        assert f"\n{kind} " in out
    assert "ratio" in out and "expected peak of our step" in out
