"""The gpt2 example's corpus and batches: bytes of a user's file, or by default the `.py` sources
of the running interpreter's standard library (every Python ships them: no download), read in
sorted path order. The last 5% is held out; training windows are drawn from a seeded generator."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np

from engine.errors import TorchLeanError

HELD_OUT = 0.05


class CorpusError(TorchLeanError):
    """A corpus file that is missing, unreadable, empty or too short for the sequence length."""


def stdlib_sources() -> list[Path]:
    """The standard library's .py files in sorted path order; installed packages are left out
    (site-packages sits under the stdlib directory on many installs)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py")
                  if not {"site-packages", "dist-packages"} & set(p.relative_to(root).parts)
                  and p.is_file())


def read_corpus(data_file: str | None) -> tuple[bytes, str]:
    """(the corpus bytes, a one-line description of where they came from)."""
    if data_file is None:
        files = stdlib_sources()
        if not files:
            raise CorpusError(f"no .py files under the standard library "
                              f"{sysconfig.get_paths()['stdlib']}; pass --data-file PATH")
        text = b"".join(p.read_bytes() for p in files)
        return text, f"{len(files)} standard-library .py files"
    path = Path(data_file)
    if not path.is_file():
        raise CorpusError(f"--data-file {data_file}: no such file; pass the path of a text file")
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"--data-file {data_file} cannot be read ({exc.strerror or exc}); "
                          "pass a readable file") from None
    if not text:
        raise CorpusError(f"--data-file {data_file} is empty; pass a file with some text")
    return text, str(path)


class Corpus:
    """A byte corpus split into a training part and the held-out last 5%."""

    def __init__(self, text: bytes, seq_len: int, source: str = "corpus") -> None:
        data = np.frombuffer(text, dtype=np.uint8)
        cut = len(data) - int(len(data) * HELD_OUT)
        # Each part must hold one window of seq_len inputs and the byte after it.
        need = int(np.ceil((seq_len + 1) / HELD_OUT)) + 1
        if len(data) - cut < seq_len + 1:
            raise CorpusError(f"{source} has {len(data)} bytes; --seq-len {seq_len} needs at "
                              f"least {need} so that its held-out 5% holds one window of "
                              f"{seq_len + 1} bytes; pass a longer file or a shorter --seq-len")
        self.train, self.held = data[:cut], data[cut:]
        self.seq_len = seq_len

    def batch(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, next-byte targets), each [batch_size, seq_len], from random training windows."""
        starts = rng.integers(0, len(self.train) - self.seq_len, size=batch_size)
        return windows(self.train, starts, self.seq_len)

    def held_out(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Fixed held-out windows, evenly spaced over the last 5%: the same every log interval."""
        last = len(self.held) - self.seq_len - 1
        starts = np.linspace(0, last, num=batch_size).astype(np.int64)
        return windows(self.held, starts, self.seq_len)


def windows(data: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    w = data[idx]
    return w[:, :-1], w[:, 1:]


def unigram_entropy(data: np.ndarray) -> float:
    """The corpus's byte unigram entropy in nats: what a model that ignores context can reach."""
    counts = np.bincount(data, minlength=256).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
