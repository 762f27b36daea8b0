"""Do the NVRTC options every capsule's policy is declared from take effect? A probe kernel
compiled through the loader's own path (loader.compile_source, as every .cu file is) under each
flag set, in a fresh process per set (the set is read at import):
  a*b + c with a = b = 1 + 2^-12, c = -(1 + 2^-11): two roundings give 0 (a*b's 2^-24 is a tie
  rounded to even), one FMA gives 2^-24, so it shows whether --fmad=false kept them separate;
  1e-40 * 0.5: a subnormal product, kept under --ftz=false and flushed to 0 under --ftz=true.
On the H200 the compile-flag matrix's `ftz` set flushed nothing (evidence/h200-runs/2026-12-01/
ftz-probe.txt) while NVRTC handed the same options emitted .ftz instructions for PTX: this test
tells, on the loader's own path, which options reach the binary: it failed there while the loader
asked NVRTC for SASS (-arch=sm_90) and passes since it asks for PTX (loader.compile_source)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cuda

_PROBE = r'''
import json
import numpy as np
import cupy
from cupy.cuda import function
from engine.runtime import loader
SRC = r"""extern "C" __global__ void probe(const float* x, float* out) {
    out[0] = x[0] * x[1] + x[2];
    out[1] = x[3] * x[4];
}"""
mod = function.Module()
mod.load(loader.compile_source(SRC, "probe.cu"))
a = np.float32(1 + 2.0 ** -12)
x = cupy.asarray(np.array([a, a, -(1 + 2.0 ** -11), 1e-40, 0.5], np.float32))
out = cupy.full(2, np.nan, np.float32)
mod.get_function("probe")((1,), (1,), (x, out))
print(json.dumps({"options": loader.OPTIONS, "out": [float(v) for v in cupy.asnumpy(out)]}))
'''

# flag set -> (a*b + c contracted into an FMA, the subnormal product flushed)
EXPECTED = {"default": (False, False), "ftz": (False, True), "fmad": (True, False),
            "fast-math": (True, True)}


@pytest.mark.parametrize("flag_set", sorted(EXPECTED))
def test_each_flag_set_reaches_the_binary(flag_set):
    env = dict(os.environ, TORCHLEAN_NVRTC_FLAG_SET=flag_set)
    env.pop("TORCHLEAN_NVRTC_DECLARED_FLAG_SET", None)
    run = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    fused, flushed = EXPECTED[flag_set]
    fma, product = got["out"]
    assert fma == (2.0 ** -24 if fused else 0.0), (flag_set, got)
    assert (product == 0.0) is flushed and product >= 0.0, (flag_set, got)


def test_a_source_nvrtc_refuses_raises_kernel_compile_error_with_the_log():
    from engine.errors import KernelCompileError
    from engine.runtime import loader
    with pytest.raises(KernelCompileError) as err:
        loader.compile_source('extern "C" __global__ void k() { undeclared_name = 1; }', "bad.cu")
    message = str(err.value)
    assert "bad.cu" in message and "--fmad=false" in message and "undeclared_name" in message
