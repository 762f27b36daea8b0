"""On the GPU, a gpt2 forward leaves live exactly what benchmarks/memory_gpt2.py's CPU accounting
says the flash_cuda rules keep (issue 18), and its backward gives all of it back: afterwards only
the parameters' gradients are new. The tape before the saves declarations kept about twice as
much after the forward and everything until the backward ended."""
from __future__ import annotations

import dataclasses
import gc

import pytest

from engine.models import gpt2
from engine.profile import profile_named
from engine.session import Session, use_session
from test_tape_memory import _output_of

pytestmark = pytest.mark.cuda

CONFIG = dataclasses.replace(gpt2.preset("small"), layers=2)
B, T = 4, 128
# Live bytes are counted per block handed out; besides the arrays the accounting sees, the step
# holds a few small ones of its own (the loss scalar, cached strided-copy metadata): a declared
# allowance far under one [B*T, width] activation (512 KiB here).
SMALL = 64 * 1024


def _live() -> int:
    import cupy
    from engine.runtime.allocator import allocator_stats
    gc.collect()
    cupy.cuda.Device().synchronize()
    return allocator_stats().live_bytes


def test_forward_keeps_what_the_accounting_says_and_backward_gives_it_back():
    from benchmarks import memory_gpt2
    model_c, events, _ = memory_gpt2.forward_events(CONFIG, B, T)
    kinds = memory_gpt2.kept_by_kind(model_c, events, memory_gpt2.rules_of("flash_cuda"))
    del model_c, events
    # The eager loss's gather indices stay NumPy arrays on the host (each call uploads them);
    # the mask is the model's cache, made by the warm-up step.
    expected = sum(v for k, v in kinds.items() if k not in ("gather indices", "mask (model cache)"))
    tokens, targets = memory_gpt2._batch(B, T)
    with use_session(Session("cuda", profile_named("flash_cuda"))):
        model = gpt2.GPT(CONFIG, 0)
        model.loss(tokens, targets).backward()      # warm: handles, workspace, mask cache
        for p in model.parameters():
            p.grad = None
        before = _live()
        loss = model.loss(tokens, targets)
        kept = _live() - before
        assert expected - SMALL <= kept <= expected + SMALL, (kept, expected, kinds)
        loss.backward()
        del loss
        grads = sum(p.grad.buffer.data.nbytes for p in model.parameters())
        after = _live() - before
        assert grads - SMALL <= after <= grads + SMALL, (after, grads)


def test_owned_gradients_become_grads_uncopied_and_shared_ones_are_copied():
    # (the cupy_copy launches of a gpt2 step were these copies: one per parameter per step)
    import numpy as np
    from engine import ops, tensor
    with use_session(Session("cuda", profile_named("flash_cuda"))):
        a = tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        w = tensor(np.arange(12, dtype=np.float32).reshape(4, 3), requires_grad=True)
        y = ops.matmul(a, w, trans_b=True)
        got = _output_of(y.node)
        ops.reduce_mean(y).backward()
        assert a.grad.buffer.data.data.mem is got[0].data.mem
        assert w.grad.buffer.data.data.mem is got[1].data.mem
        b, c = (tensor(np.ones(3, np.float32), requires_grad=True) for _ in range(2))
        s = ops.add(b, c)
        shared = _output_of(s.node)
        ops.reduce_mean(s).backward()
        assert shared[0] is shared[1]
        mems = {id(b.grad.buffer.data.data.mem), id(c.grad.buffer.data.data.mem),
                id(shared[0].data.mem)}
        assert len(mems) == 3
        np.testing.assert_array_equal(b.grad.numpy(), np.full(3, 1 / 3, np.float32))
