"""rand_uniform and bernoulli_mask (engine/csrc/cuda/random.cu): Philox4x32-10, the bits of the
CPU reference for every (shape, seed)."""
from __future__ import annotations

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import F32, U32, empty, grid, kernel
from engine.types import BackendOp as Op

_uniform_kernel = kernel("random.cu", "tl_philox_uniform")
_bernoulli_kernel = kernel("random.cu", "tl_bernoulli_mask")


def _key(seed: int) -> tuple:
    seed = int(seed)
    return U32(seed & 0xFFFFFFFF), U32((seed >> 32) & 0xFFFFFFFF)


def _rand_uniform(shape, seed):
    out = empty(tuple(shape))
    if out.size:
        _uniform_kernel(grid(out.size), (out, U32(out.size)) + _key(seed))
    return out


def _bernoulli_mask(shape, p, seed):
    out = empty(tuple(shape))
    if out.size:
        _bernoulli_kernel(grid(out.size), (out, U32(out.size)) + _key(seed) + (F32(p),))
    return out


DECLS = (   # constants of the graph: no VJP; integer arithmetic, so every bit is exact
    KernelDecl(Op.rand_uniform, "random.cu", ("tl_philox_uniform",), (), _rand_uniform,
               exact=True),
    KernelDecl(Op.bernoulli_mask, "random.cu", ("tl_bernoulli_mask",), (), _bernoulli_mask,
               exact=True),
)
