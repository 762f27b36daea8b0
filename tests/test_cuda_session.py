"""The native capsules through the wrappers: a CUDA session runs a small graph forward and
backward like the CPU session, the backend report names what really ran, and quickstart_mlp's
losses agree with the CPU run."""
from __future__ import annotations

import numpy as np
import pytest


pytestmark = pytest.mark.cuda


def _graph(session, x_host, w_host, b_host):
    from engine import ops
    from engine.session import use_session
    from engine.tensor import tensor
    with use_session(session):
        x = tensor(x_host, requires_grad=True)
        w = tensor(w_host, requires_grad=True)
        b = tensor(b_host, requires_grad=True)
        h = ops.matmul(x, w, trans_b=True)
        h = ops.add(h, ops.broadcast(b, h.shape))
        h = ops.gelu(ops.relu(h))
        h = ops.reduce_sum(ops.mul(h, ops.sigmoid(h)), axes=(1,))
        loss = ops.reduce_mean(ops.exp(ops.scale(h, 0.01)))
        loss.backward()
        return loss.item(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy(), \
            session.backend_report()


def test_cuda_graph_matches_cpu_and_reports_native_capsules():
    from engine.session import Session
    r = np.random.default_rng(3)
    args = (r.standard_normal((16, 8)).astype(np.float32),
            r.standard_normal((12, 8)).astype(np.float32),
            r.standard_normal(12).astype(np.float32))
    cpu = _graph(Session("cpu"), *args)
    gpu = _graph(Session("cuda"), *args)
    # Every value passes through a dot of length 8 and a sum of length 12 with O(1) condition
    # numbers here; relative differences of a few 1e-6 are the float32 error model, so 1e-4
    # leaves room while still catching a wrong kernel.
    assert gpu[0] == pytest.approx(cpu[0], rel=1e-4)
    for got, want in zip(gpu[1:4], cpu[1:4]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    report = gpu[4]
    for line in ("add: native_cuda.add", "relu: native_cuda.relu", "gelu: native_cuda.gelu",
                 "broadcast: native_cuda.broadcast", "matmul: cublas.matmul",
                 "reduce_sum: native_cuda.reduce_sum", "provider=native-cuda"):
        assert line in report, report


def test_quickstart_mlp_two_steps_agree_with_cpu():
    from engine.models import quickstart_mlp
    from engine.session import Session
    cpu = quickstart_mlp.run(Session("cpu"), steps=2, seed=2026, log_every=1)
    gpu = quickstart_mlp.run(Session("cuda"), steps=2, seed=2026, log_every=1)
    for (s1, l1), (s2, l2) in zip(cpu.losses, gpu.losses):
        assert s1 == s2
        assert l2 == pytest.approx(l1, rel=1e-5), (cpu.losses, gpu.losses)
    assert "provider=native-cuda" in gpu.backend_report or "provider=cublas" in gpu.backend_report
