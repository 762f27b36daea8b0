"""The mutation suite on the GPU: the planted bugs of tests/mutants.py as CUDA capsules (CuPy arrays
in and out, through the harness's device path: uploads, device-side poisoning, inputs compared on
the device after the call) must be flagged for their reasons over 3 seeds, and the correct kernels
must stay clean over 10 seeds. Arithmetic runs on the host where CuPy's own kernels would flush
subnormals (-ftz=true) and so add a second, unplanted bug; the memory bugs act on device memory."""
import numpy as np
import pytest

import mutants as M
import mutation_registry as R
import test_mutations as T
from engine.types import Device

pytestmark = pytest.mark.cuda


def _host(x):
    return x.get() if hasattr(x, "get") else x


def on_gpu(fn):
    """A kernel that takes and returns CuPy arrays around a host computation."""
    import cupy

    def forward(*arrays, **params):
        return cupy.asarray(fn(*(_host(a) for a in arrays),
                               **{k: _host(v) for k, v in params.items()}))
    return forward


def vjp_on_gpu(fn):
    import cupy

    def vjp(inputs, out, g, **params):
        grads = fn(tuple(_host(a) for a in inputs), _host(out), _host(g),
                   **{k: _host(v) for k, v in params.items()})
        return tuple(None if x is None else cupy.asarray(x) for x in grads)
    return vjp


def relu_clobbering_device_input(a):
    import cupy
    out = M.relu_clobbering_input(a.get())
    a[...] = cupy.asarray(out)            # the planted bug, on device memory
    return cupy.asarray(out)


def exp_prefix_only_on_device(a):
    import cupy
    out = cupy.empty(a.shape, dtype=cupy.float32)   # the device cache's (poisoned) block
    n = min(a.size, 1024)
    if n:
        out.reshape(-1)[:n] = cupy.asarray(M.exp64(a.reshape(-1)[:n].get()))
    return out


def sub_vjp_negating_device_grad(inputs, out, g):
    import cupy
    ga = g.copy()
    g[...] = cupy.asarray(-g.get())       # the planted bug, on device memory
    return ga, g.copy()


DEVICE_SIDE = {"relu_writes_into_its_input": relu_clobbering_device_input,
               "exp_writes_only_a_prefix": exp_prefix_only_on_device}
DEVICE_VJP = {"sub_vjp_negates_the_cotangent_in_place": sub_vjp_negating_device_grad}


def cuda_capsule(op, name, forward, policy, vjp=None, declared=None):
    return T.capsule(op, name, forward, policy, vjp, declared, device=Device.cuda)


def _mutant(name):
    op, forward, policy, vjp, declared, reason, allowed = R.MUTANTS[name]
    fwd = DEVICE_SIDE.get(name) or (forward if name in R.DEVICE_AWARE else on_gpu(forward))
    bwd = DEVICE_VJP.get(name) or (vjp_on_gpu(vjp) if vjp else None)
    return cuda_capsule(op, f"mutant.{name}", fwd, policy, bwd, declared), reason, allowed


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(T.MUTANTS))   # issue 35's: test_cuda_mutations_history
def test_planted_bug_is_flagged_on_the_gpu(name, seed):
    cap_handler, reason, allowed = _mutant(name)
    T.assert_caught(T.campaign(cap_handler, seed=seed), reason, allowed)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", sorted(T.CORRECT))
def test_correct_kernels_stay_clean_on_the_gpu(name, seed):
    op, forward, policy, vjp = T.CORRECT[name]
    cap_handler = cuda_capsule(op, f"correct.{name}", on_gpu(forward), policy,
                               vjp_on_gpu(vjp) if vjp else None)
    result = T.campaign(cap_handler, seed=seed, only=None if seed == 0 else T.SEEDED)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])
    assert np.isfinite(result["stats"]["forward"]["worst_ratio"])
