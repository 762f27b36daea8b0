"""Linear, ReLU, Sequential, Embedding and LayerNorm, with seeded parameter initialisation shared
by every device."""
from __future__ import annotations

import math

import numpy as np

from engine import ops
from engine.runtime.philox import unit_uniform
from engine.tensor import Tensor, tensor


def uniform_init(shape: tuple[int, ...], bound: float, seed: int) -> np.ndarray:
    """U(-bound, bound) from the same Philox stream as rand_uniform, so every device starts from
    identical parameters for a given seed."""
    u = unit_uniform(math.prod(shape), seed).astype(np.float64)   # exact: 24-bit fractions
    return ((2.0 * u - 1.0) * bound).astype(np.float32).reshape(shape)


class Module:
    def parameters(self) -> list[Tensor]:
        return []

    def __call__(self, x: Tensor, *args, **kwargs) -> Tensor:
        return self.forward(x, *args, **kwargs)


class Linear(Module):
    """y = x W^T + b, as reshape -> matmul (transpose flag, no copy) -> reshape -> broadcast -> add."""

    def __init__(self, in_features: int, out_features: int, seed: int) -> None:
        bound = 1.0 / math.sqrt(in_features)
        self.weight = tensor(uniform_init((out_features, in_features), bound, seed),
                             requires_grad=True)
        self.bias = tensor(uniform_init((out_features,), bound, seed + 1), requires_grad=True)

    def parameters(self) -> list[Tensor]:
        return [self.weight, self.bias]

    def forward(self, x: Tensor) -> Tensor:
        y = self.unbiased(x)
        return ops.add(y, ops.broadcast(self.bias, y.shape))

    def unbiased(self, x: Tensor) -> Tensor:
        """x W^T without the bias, for a caller that fuses the bias into the next op."""
        out_f, in_f = self.weight.shape
        lead = x.shape[:-1]
        x2 = ops.reshape(x, (math.prod(lead), in_f))
        return ops.reshape(ops.matmul(x2, self.weight, trans_b=True), lead + (out_f,))


class Embedding(Module):
    """A table [count, dim] looked up by integer ids: one gather along axis 0 (its VJP is the
    ordered scatter-add of the rows' gradients). Uniform init with the standard deviation `std`."""

    def __init__(self, count: int, dim: int, seed: int, std: float = 0.02) -> None:
        self.weight = tensor(uniform_init((count, dim), std * math.sqrt(3.0), seed),
                             requires_grad=True)

    def parameters(self) -> list[Tensor]:
        return [self.weight]

    def forward(self, ids) -> Tensor:
        """ids: a 1-D integer sequence; returns [len(ids), dim]."""
        return ops.gather(self.weight, 0, ids)


class LayerNorm(Module):
    """layer_norm over the last axis with a learned scale (ones) and shift (zeros)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        self.weight = tensor(np.ones(dim, np.float32), requires_grad=True)
        self.bias = tensor(np.zeros(dim, np.float32), requires_grad=True)
        self.eps = eps

    def parameters(self) -> list[Tensor]:
        return [self.weight, self.bias]

    def forward(self, x: Tensor) -> Tensor:
        return ops.layer_norm(x, self.weight, self.bias, self.eps)


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Sequential(Module):
    def __init__(self, *layers: Module) -> None:
        self.layers = layers

    def parameters(self) -> list[Tensor]:
        return [p for layer in self.layers for p in layer.parameters()]

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SpectralConv1d(Module):
    """The Fourier layer of a 1-D FNO: y = irfft(W rfft(x)) over the grid, keeping `modes` bins,
    one fused fft_fno op. x (grid, width) or (batch, grid, width). The weights start as common FNO
    code has them: scale * U[0, 1), scale = 1 / (width * width), real and imaginary parts from
    their own seeded streams (seed and seed + 1)."""

    def __init__(self, width: int, modes: int, seed: int) -> None:
        shape = (modes, width, width)
        scale = 1.0 / (width * width)
        draw = lambda s: (unit_uniform(math.prod(shape), s).astype(np.float64)  # noqa: E731
                          * scale).astype(np.float32).reshape(shape)
        self.w_re = tensor(draw(seed), requires_grad=True)
        self.w_im = tensor(draw(seed + 1), requires_grad=True)

    def parameters(self) -> list[Tensor]:
        return [self.w_re, self.w_im]

    def forward(self, x: Tensor) -> Tensor:
        return ops.fft_fno(x, self.w_re, self.w_im)
