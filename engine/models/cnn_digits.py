"""cnn_digits: conv -> relu -> max_pool -> conv -> relu -> avg_pool -> linear on the 8x8 handwritten
digits that scikit-learn ships (`sklearn.datasets.load_digits`: 1797 images, 16 grey levels, no
download), trained with Adam on minibatches and scored on a held-out fifth.

The split and the minibatch order are drawn from NumPy generators seeded with `seed`, and the
parameters from the layers' Philox initialisation, so a seed fixes the whole run on every device.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import nn, ops
from engine.errors import TorchLeanError
from engine.optim import Adam
from engine.session import Session, use_session
from engine.tensor import Tensor, tensor

CLASSES = 10
HELD_OUT = 0.2          # the held-out fraction of the 1797 images


class MissingDatasetError(TorchLeanError):
    """scikit-learn, which ships the digits, is not installed."""


def digits_loader():
    """sklearn.datasets.load_digits (not yet called), or the named error saying how to get it."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise MissingDatasetError(
            "cnn_digits needs scikit-learn for its dataset (sklearn.datasets.load_digits, shipped "
            "with the package, no download); install it with `pip install scikit-learn` or the "
            "project's extra: pip install -e '.[examples]'") from exc
    return load_digits


def dataset(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) scaled to [0, 1], integer labels;
    the split is a permutation drawn from `seed`, stratified by nothing (the classes are balanced)."""
    digits = digits_loader()()
    x = (digits.images.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = len(y) - int(round(HELD_OUT * len(y)))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


class DigitsNet(nn.Module):
    """conv 1->8 (3x3, pad 1) -> relu -> max_pool 2 -> conv 8->16 (3x3, pad 1) -> relu ->
    avg_pool 2 -> flatten 64 -> linear 64->10."""

    def __init__(self, seed: int) -> None:
        self.conv1 = nn.Conv(1, 8, 3, padding=1, seed=seed)
        self.conv2 = nn.Conv(8, 16, 3, padding=1, seed=seed + 2)
        self.head = nn.Linear(16 * 2 * 2, CLASSES, seed + 4)

    def parameters(self) -> list[Tensor]:
        return self.conv1.parameters() + self.conv2.parameters() + self.head.parameters()

    def forward(self, x: Tensor) -> Tensor:
        h = ops.max_pool(ops.relu(self.conv1(x)), 2)
        h = ops.avg_pool(ops.relu(self.conv2(h)), 2)
        return self.head(ops.reshape(h, (h.shape[0], 16 * 2 * 2)))


def one_hot(labels: np.ndarray) -> np.ndarray:
    out = np.zeros((len(labels), CLASSES), np.float32)
    out[np.arange(len(labels)), labels] = 1.0
    return out


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean over the batch of -sum_c onehot_c log_softmax(logits)_c."""
    picked = ops.reduce_sum(ops.mul(ops.log_softmax(logits, axis=-1), targets))
    return ops.scale(picked, -1.0 / logits.shape[0])


@dataclass
class RunResult:
    losses: list[float] = field(default_factory=list)   # every step's minibatch loss
    train_accuracy: float = float("nan")
    test_accuracy: float = float("nan")
    backend_report: str = ""


def accuracy(model: DigitsNet, x: np.ndarray, y: np.ndarray) -> float:
    predicted = model(tensor(x)).numpy().argmax(axis=1)
    return float(np.mean(predicted == y))


def run(session: Session, steps: int = 300, seed: int = 2026, lr: float = 0.01,
        batch_size: int = 128) -> RunResult:
    """Train for `steps` minibatch steps (a fresh permutation of the training set per epoch)."""
    result = RunResult()
    x_train, y_train, x_test, y_test = dataset(seed)
    targets = one_hot(y_train)
    batches = np.random.default_rng(seed + 1)
    with use_session(session):
        model = DigitsNet(seed)
        opt = Adam(model.parameters(), lr=lr)
        order = batches.permutation(len(y_train))
        at = 0
        for _ in range(steps):
            if at + batch_size > len(order):
                order, at = batches.permutation(len(y_train)), 0
            pick = order[at:at + batch_size]
            at += batch_size
            opt.zero_grad()
            loss = cross_entropy(model(tensor(x_train[pick])), tensor(targets[pick]))
            loss.backward()
            result.losses.append(loss.item())
            opt.step()
        result.train_accuracy = accuracy(model, x_train, y_train)
        result.test_accuracy = accuracy(model, x_test, y_test)
        result.backend_report = session.backend_report()
    return result
