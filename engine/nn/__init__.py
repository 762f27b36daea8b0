"""Layers built from ops. A layer is not a backend op: it decomposes into the ops that cross the
backend boundary, and only those appear in the backend report."""
from engine.nn.attention import MultiHeadAttention
from engine.nn.conv import Conv
from engine.nn.layers import Linear, Module, ReLU, Sequential, uniform_init

__all__ = ["Linear", "MultiHeadAttention", "Module", "ReLU", "Sequential", "uniform_init", "Conv"]
