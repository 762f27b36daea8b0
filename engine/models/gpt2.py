"""gpt2: a byte-level GPT (vocabulary 256) built only from engine ops, so every kernel it runs is
an audited capsule: token + position embeddings (gather), pre-norm blocks of multi-head causal
attention (one scaled_dot_product_attention node with a hard causal mask) and a GELU MLP (its
first bias and the GELU as one fused op, ops.bias_gelu, where the profile plans it), a final
layer norm, a head tied to the token table (matmul with trans_b, no transposed copy), and the
mean cross-entropy over tokens as one fused op (ops.cross_entropy; log_softmax + gather + mean
under a profile that plans no cross_entropy capsule).

Parameters come from the layers' Philox initialisation and batches from a NumPy generator seeded
with `seed`, so a seed fixes the whole run on every device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import nn, ops
from engine.errors import TorchLeanError
from engine.tensor import Tensor
from engine.types import BackendOp, RuntimeEntry

VOCAB = 256


class GPTConfigError(TorchLeanError, ValueError):
    """A preset, sequence length or batch size the model cannot take."""


@dataclass(frozen=True)
class GPTConfig:
    layers: int
    width: int
    heads: int
    context: int            # the most tokens one forward pass sees (position table rows)
    batch_size: int         # the preset's default batch
    seq_len: int            # the preset's default training sequence length


# tiny fits CI on one CPU core; small and gpt2-124m are the benchmark shapes (gpt2-124m is
# GPT-2 small's shape with the byte vocabulary).
PRESETS = {
    "tiny": GPTConfig(layers=2, width=32, heads=2, context=64, batch_size=8, seq_len=32),
    "small": GPTConfig(layers=4, width=256, heads=4, context=256, batch_size=16, seq_len=256),
    "gpt2-124m": GPTConfig(layers=12, width=768, heads=12, context=1024, batch_size=8,
                           seq_len=1024),
}

# Every op a training step and a sampling pass dispatch (tests/test_gpt2.py checks the list
# against a real step): what --require-evidence plans up front. The loss is the fused
# cross_entropy entry and the MLP's first bias and GELU the fused bias_gelu entry (the maintained
# profiles all plan both; GPT._cross_entropy's and Block._gelu_fc's compositions serve a profile
# that plans none).
# Causal attention is the attention_heads entry where the profile plans it (checked_cpu,
# checked_cuda, graph_cuda); accurate_cuda and libtorch_forward_cuda leave it unplanned and run
# the permutes around scaled_dot_product_attention (ops_for).
# The residual adds and the layer norms after them are the add_layer_norm entry where the profile
# plans it (every add of the residual stream but the embeddings' sum; the first block's ln_1 stays
# a layer_norm), else add and layer_norm.
OPS = (BackendOp.gather, BackendOp.add, BackendOp.reshape, BackendOp.layer_norm,
       BackendOp.matmul, RuntimeEntry.attention_heads, BackendOp.broadcast,
       RuntimeEntry.bias_gelu, RuntimeEntry.cross_entropy, RuntimeEntry.add_layer_norm)
COMPOSED_ATTENTION = (BackendOp.permute, BackendOp.scaled_dot_product_attention)


def ops_for(profile) -> tuple:
    """OPS under `profile`: attention_heads, or where the profile does not plan it the
    composition's permute and scaled_dot_product_attention in its place."""
    ops = OPS if profile.plans(RuntimeEntry.add_layer_norm) else \
        tuple(o for o in OPS if o is not RuntimeEntry.add_layer_norm)
    if profile.plans(RuntimeEntry.attention_heads):
        return ops
    return tuple(o for o in ops if o is not RuntimeEntry.attention_heads) + COMPOSED_ATTENTION


def preset(name: str) -> GPTConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise GPTConfigError(f"gpt2: no preset named {name!r}; choose one of "
                             f"{', '.join(PRESETS)}") from None


def check_shape(config: GPTConfig, batch_size: int, seq_len: int) -> None:
    if batch_size < 1:
        raise GPTConfigError(f"gpt2: --batch-size must be at least 1, got {batch_size}")
    if not 1 <= seq_len <= config.context:
        raise GPTConfigError(f"gpt2: --seq-len {seq_len} must be in [1, {config.context}] (the "
                             f"preset's context); pass a shorter --seq-len or a larger preset")


def _planned(entry: RuntimeEntry) -> bool:
    """Whether the session's profile plans a capsule for a fused entry (planning only, no gate:
    a gate that then refuses the capsule raises at dispatch, never falls back)."""
    from engine.session import current_session
    return current_session().profile.plans(entry)


class Block(nn.Module):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)); mlp = linear d->4d, gelu, linear 4d->d."""

    def __init__(self, width: int, heads: int, seed: int) -> None:
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiHeadAttention(width, heads, seed)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width, seed + 4)
        self.proj = nn.Linear(4 * width, width, seed + 6)

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        a = self.attn
        return [("ln_1.weight", self.ln_1.weight), ("ln_1.bias", self.ln_1.bias),
                ("attn.q.weight", a.wq), ("attn.k.weight", a.wk), ("attn.v.weight", a.wv),
                ("attn.o.weight", a.wo),
                ("ln_2.weight", self.ln_2.weight), ("ln_2.bias", self.ln_2.bias),
                ("mlp.fc.weight", self.fc.weight), ("mlp.fc.bias", self.fc.bias),
                ("mlp.proj.weight", self.proj.weight), ("mlp.proj.bias", self.proj.bias)]

    def forward(self, x: Tensor, mask, fused_gelu: bool = False) -> Tensor:
        x = ops.add(x, self.attn(self.ln_1(x), mask=mask))
        return ops.add(x, self.proj(self._gelu_fc(self.ln_2(x), fused_gelu)))

    def forward_fused(self, x: Tensor, h: Tensor, mask, fused_gelu: bool,
                      next_ln: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        """forward with each residual add and the layer norm after it as one add_layer_norm:
        h = ln_1(x) comes in, (x', next_ln(x')) goes out (next_ln: the next block's ln_1, or
        ln_f). The same float32 sums and the same layer norms as forward's."""
        x, h = ops.add_layer_norm(x, self.attn(h, mask=mask), self.ln_2.weight, self.ln_2.bias,
                                  self.ln_2.eps)
        return ops.add_layer_norm(x, self.proj(self._gelu_fc(h, fused_gelu)), next_ln.weight,
                                  next_ln.bias, next_ln.eps)

    def _gelu_fc(self, h: Tensor, fused: bool) -> Tensor:
        """gelu(fc(h)): fc's product, then its bias and the GELU as one bias_gelu op (one tape
        node, no [.., 4d] temporary for the biased product) where the profile plans it; else
        fc (broadcast + add of the bias), then gelu. The same float32 sum x + b either way."""
        if fused:
            return ops.bias_gelu(self.fc.unbiased(h), self.fc.bias)
        return ops.gelu(self.fc(h))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, seed: int) -> None:
        self.config = config
        self.wte = nn.Embedding(VOCAB, config.width, seed)
        self.wpe = nn.Embedding(config.context, config.width, seed + 1)
        # Each block draws from its own run of 8 seeds (attention uses 4, each linear 2).
        self.blocks = [Block(config.width, config.heads, seed + 8 * (i + 1))
                       for i in range(config.layers)]
        self.ln_f = nn.LayerNorm(config.width)
        self._masks: dict[tuple, object] = {}

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        named = [("wte", self.wte.weight), ("wpe", self.wpe.weight)]
        for i, block in enumerate(self.blocks):
            named += [(f"h.{i}.{n}", p) for n, p in block.named_parameters()]
        return named + [("ln_f.weight", self.ln_f.weight), ("ln_f.bias", self.ln_f.bias)]

    def parameters(self) -> list[Tensor]:
        return [p for _, p in self.named_parameters()]

    def decays(self) -> list[bool]:
        """AdamW's decay mask: the matrices of the blocks decay; embeddings, norms, biases not."""
        return [p.ndim == 2 and n.startswith("h.") for n, p in self.named_parameters()]

    def _causal(self, b: int, t: int, device: str):
        """The causal mask expanded per (batch, head), kept on the session's device: built once
        per shape instead of expanded and uploaded by every layer of every step."""
        key = (b, t, device)
        if key not in self._masks:
            one = np.tril(np.ones((t, t), dtype=bool))   # true = the key is visible
            m = np.ascontiguousarray(np.broadcast_to(one, (b * self.config.heads, t, t)))
            if device == "cuda":
                import cupy
                m = cupy.asarray(m)
            self._masks[key] = m
        return self._masks[key]

    def forward(self, tokens: np.ndarray) -> Tensor:
        """tokens: integers in [0, 256) of shape [batch, t], t <= context; logits [batch*t, 256]."""
        b, t = tokens.shape
        if t > self.config.context:
            raise GPTConfigError(f"gpt2: {t} tokens exceed the context {self.config.context}")
        positions = np.tile(np.arange(t, dtype=np.int64), b)
        return self._logits(tokens.reshape(-1).astype(np.int64), positions, b, t)

    def _logits(self, ids, positions, b: int, t: int) -> Tensor:
        d = self.config.width
        x = ops.add(self.wte(ids), self.wpe(positions))
        x = ops.reshape(x, (b, t, d))
        # "causal": MultiHeadAttention's attention_heads (no mask tensor, no permutes) where the
        # plan has it; else the triangle expanded per (batch, head), kept per shape
        mask = "causal" if nn.heads_planned() else self._causal(b, t, x.device.label)
        fused_gelu = _planned(RuntimeEntry.bias_gelu)
        if _planned(RuntimeEntry.add_layer_norm) and self.blocks:
            h = self.blocks[0].ln_1(x)
            lns = [block.ln_1 for block in self.blocks[1:]] + [self.ln_f]
            for block, next_ln in zip(self.blocks, lns):
                x, h = block.forward_fused(x, h, mask, fused_gelu, next_ln)
        else:
            for block in self.blocks:
                x = block(x, mask, fused_gelu)
            h = self.ln_f(x)
        h = ops.reshape(h, (b * t, d))
        return ops.matmul(h, self.wte.weight, trans_b=True)   # tied head: h @ wte^T

    def loss(self, tokens: np.ndarray, targets: np.ndarray) -> Tensor:
        """Mean cross-entropy of the next bytes: -mean_i log_softmax(logits_i)[target_i]."""
        logits = self(tokens)
        n = logits.shape[0]
        t = targets.reshape(-1).astype(np.int64)
        return self._cross_entropy(logits, t, lambda: np.arange(n, dtype=np.int64) * VOCAB + t)

    def _cross_entropy(self, logits: Tensor, targets, picks) -> Tensor:
        """The fused ops.cross_entropy when the session's profile plans a capsule for it (a
        gate that then refuses the capsule raises, never falls back); else the composition
        log_softmax + gather of picks() (flat indices of the targets) + mean, negated."""
        if _planned(RuntimeEntry.cross_entropy):
            return ops.cross_entropy(logits, targets)
        n = logits.shape[0]
        flat = ops.reshape(ops.log_softmax(logits, -1), (n * VOCAB,))
        return ops.scale(ops.reduce_mean(ops.gather(flat, 0, picks())), -1.0)

    def loss_on_device(self, tokens, targets, b: int, t: int) -> Tensor:
        """loss() with the batch already on the device as engine.indices.CheckedIndices (b*t
        bytes each, checked below 256 when written): the step a CUDA graph captures, which
        uploads nothing. The position and pick indices are built on the device once per shape
        (the warm-up step builds them) and then reused, so the ops and kernels are loss()'s."""
        from engine.indices import CheckedIndices
        if tokens.upper > VOCAB or targets.upper > VOCAB:
            raise GPTConfigError(f"gpt2: device tokens and targets must be checked below {VOCAB}, "
                                 f"got bounds {tokens.upper} and {targets.upper}")
        if t > self.config.context:
            raise GPTConfigError(f"gpt2: {t} tokens exceed the context {self.config.context}")
        key = ("device", b, t)
        if key not in self._masks:
            self._masks[key] = (
                CheckedIndices.upload(np.tile(np.arange(t, dtype=np.int64), b), t, "positions"),
                CheckedIndices.upload(np.arange(b * t, dtype=np.int64) * VOCAB, b * t * VOCAB,
                                      "picks"))
        positions, base = self._masks[key]
        logits = self._logits(tokens, positions, b, t)
        # base + target < (i + 1) * 256 <= b t 256 for targets below 256: in range by bound.
        return self._cross_entropy(logits, targets,
                                   lambda: CheckedIndices(base.data + targets.data, b * t * VOCAB))


def parameter_count(model: GPT) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
