"""Layers built from ops. A layer is not a backend op: it decomposes into the ops that cross the
backend boundary, and only those appear in the backend report."""
from engine.nn.attention import MultiHeadAttention, heads_planned
from engine.nn.conv import Conv
from engine.nn.layers import (Embedding, LayerNorm, Linear, Module, ReLU, Sequential,
                              SpectralConv1d, uniform_init)
from engine.nn.pooling import AvgPool, MaxPool, SmoothMaxPool

__all__ = ["AvgPool", "Conv", "Embedding", "LayerNorm", "Linear", "MaxPool", "MultiHeadAttention",
           "heads_planned",
           "Module", "ReLU", "Sequential", "SmoothMaxPool", "SpectralConv1d", "uniform_init"]
