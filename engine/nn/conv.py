"""Conv: a convolution layer over engine.ops.conv, initialised like PyTorch's Conv (kaiming-uniform
with a = sqrt(5), which gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and bias) from the
seeded Philox stream every device shares."""
from __future__ import annotations

import math

from engine import ops
from engine.nn.layers import Module, uniform_init
from engine.tensor import Tensor, tensor


class Conv(Module):
    """y = conv(x, W, b): x ([N,] c_in, *spatial), W (c_out, c_in / groups, *kernel_size)."""

    def __init__(self, c_in: int, c_out: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, seed: int = 0) -> None:
        # an int is a square 2-D kernel (TorchLean's and PyTorch's Conv2d); a tuple sets the rank
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        fan_in = (c_in // groups) * math.prod(k)
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = tensor(uniform_init((c_out, c_in // groups) + k, bound, seed),
                             requires_grad=True)
        self.bias = (tensor(uniform_init((c_out,), bound, seed + 1), requires_grad=True)
                     if bias else None)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def parameters(self) -> list[Tensor]:
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def forward(self, x: Tensor) -> Tensor:
        return ops.conv(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                        dilation=self.dilation, groups=self.groups)
