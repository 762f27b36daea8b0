"""Sampling bytes from the gpt2 example: the logits come from the model's forward pass (engine
ops); choosing the next byte from 256 logits (repeat penalty, temperature, top-k, a draw from a
generator seeded with `sample_seed`) is host code in float64, so a seed fixes the text."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import TorchLeanError


class SamplingError(TorchLeanError, ValueError):
    """A sampling setting outside its domain."""


@dataclass(frozen=True)
class SampleSettings:
    temperature: float = 0.85
    top_k: int = 12
    repeat_penalty: float = 1.25
    repeat_window: int = 24
    seed: int = 0

    def check(self) -> "SampleSettings":
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise SamplingError(f"--temperature must be a positive finite number, got "
                                f"{self.temperature}; 1 samples the model's distribution, "
                                "smaller values sharpen it")
        if self.top_k < 1:
            raise SamplingError(f"--top-k must be at least 1, got {self.top_k}; 1 is greedy, "
                                "256 keeps every byte")
        if not (self.repeat_penalty >= 1 and np.isfinite(self.repeat_penalty)):
            raise SamplingError(f"--repeat-penalty must be a finite number >= 1, got "
                                f"{self.repeat_penalty}; 1 turns the penalty off")
        if self.repeat_window < 0:
            raise SamplingError(f"--repeat-window must be at least 0, got {self.repeat_window}")
        return self


def next_byte(logits: np.ndarray, recent: np.ndarray, s: SampleSettings,
              rng: np.random.Generator) -> int:
    """One draw: logits of bytes seen in the last `repeat_window` tokens are divided by the
    penalty when positive and multiplied by it when not (CTRL's rule), then scaled by 1 /
    temperature; only the top_k largest stay (ties broken by the lower byte)."""
    z = logits.astype(np.float64).copy()
    if s.repeat_penalty != 1.0 and s.repeat_window and recent.size:
        seen = np.unique(recent[-s.repeat_window:])
        z[seen] = np.where(z[seen] > 0, z[seen] / s.repeat_penalty, z[seen] * s.repeat_penalty)
    z /= s.temperature
    k = min(s.top_k, z.size)
    keep = np.argsort(-z, kind="stable")[:k]
    p = np.exp(z[keep] - z[keep].max())
    return int(keep[rng.choice(k, p=p / p.sum())])


def generate(model, prompt: bytes, count: int, s: SampleSettings) -> bytes:
    """`count` bytes after `prompt` (a newline when empty); each step runs the model on the last
    `context` tokens."""
    rng = np.random.default_rng(s.seed)
    tokens = list(prompt or b"\n")
    out = []
    context = model.config.context
    for _ in range(count):
        window = np.asarray(tokens[-context:], dtype=np.int64)[None, :]
        logits = model(window).numpy()[-1]
        b = next_byte(logits, np.asarray(tokens, dtype=np.int64), s, rng)
        tokens.append(b)
        out.append(b)
    return bytes(out)


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
