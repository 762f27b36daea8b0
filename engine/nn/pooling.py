"""MaxPool, AvgPool and SmoothMaxPool: parameterless layers over engine.ops' pooling ops (their
arguments and checks are the ops'; docs/OPS.md, pooling)."""
from __future__ import annotations

from engine import ops
from engine.nn.layers import Module
from engine.tensor import Tensor


class MaxPool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1) -> None:
        self.kernel_size, self.stride, self.padding, self.dilation = (kernel_size, stride,
                                                                      padding, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return ops.max_pool(x, self.kernel_size, self.stride, self.padding, self.dilation)


class AvgPool(MaxPool):
    def forward(self, x: Tensor) -> Tensor:
        return ops.avg_pool(x, self.kernel_size, self.stride, self.padding, self.dilation)


class SmoothMaxPool(Module):
    def __init__(self, kernel_size, beta, stride=None, padding=0, dilation=1) -> None:
        self.kernel_size, self.beta, self.stride, self.padding, self.dilation = (
            kernel_size, beta, stride, padding, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return ops.smooth_max_pool(x, self.kernel_size, self.beta, self.stride, self.padding,
                                   self.dilation)
