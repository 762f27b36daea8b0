"""A small 1-D Fourier neural operator learning the solution operator of the heat equation
u_t = nu u_xx on the periodic grid x_j = 2 pi j / GRID: u(., 0) -> u(., T).

The data are generated here. Each initial condition is a random smooth field
u0(x) = sum_{k=1..K0} (a_k cos kx + b_k sin kx) / k^2 (a_k, b_k standard normal, seeded), and its
exact solution is u(x, T) = sum_k e^{-nu k^2 T} (a_k cos kx + b_k sin kx) / k^2: the heat equation
is diagonal in Fourier space, so the program solves it exactly (float64, rounded once).

The model (as in Li et al.'s FNO): lift (u0(x), x / 2 pi) to WIDTH channels with a linear layer,
LAYERS Fourier layers v <- gelu(SpectralConv1d(v) + Linear(v)) (the last without gelu), project
to one channel with a linear layer; Adam on the mean squared error over the training set. The
report is the mean relative L2 error ||pred - u(T)|| / ||u(T)|| on held-out initial conditions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import nn, ops
from engine.optim import Adam
from engine.session import Session, use_session
from engine.tensor import Tensor, tensor

GRID, WIDTH, MODES, LAYERS = 64, 8, 8, 2
K0 = 6                  # Fourier modes of the initial conditions
NU, T = 0.1, 1.0        # diffusivity and horizon: mode k decays by e^{-0.1 k^2}
TRAIN, TEST = 32, 16


def heat_data(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (count, GRID, 2): u0 and x / 2 pi, targets (count, GRID, 1): u(., T)), float32."""
    rng = np.random.default_rng([seed, 0x1D4EA7])
    x = 2 * np.pi * np.arange(GRID) / GRID
    k = np.arange(1, K0 + 1)
    a, b = rng.standard_normal((2, count, K0)) / k ** 2
    waves = np.cos(np.outer(k, x)), np.sin(np.outer(k, x))           # (K0, GRID) each
    u0 = a @ waves[0] + b @ waves[1]
    decay = np.exp(-NU * k ** 2 * T)
    ut = (a * decay) @ waves[0] + (b * decay) @ waves[1]
    feats = np.stack([u0, np.broadcast_to(x / (2 * np.pi), u0.shape)], axis=-1)
    return feats.astype(np.float32), ut[..., None].astype(np.float32)


class FNO1d(nn.Module):
    def __init__(self, seed: int, width: int = WIDTH, modes: int = MODES,
                 layers: int = LAYERS) -> None:
        self.lift = nn.Linear(2, width, seed)
        self.spectral = [nn.SpectralConv1d(width, modes, seed + 10 + 2 * i) for i in range(layers)]
        self.pointwise = [nn.Linear(width, width, seed + 30 + 2 * i) for i in range(layers)]
        self.project = nn.Linear(width, 1, seed + 50)

    def parameters(self) -> list[Tensor]:
        layers = [self.lift, *self.spectral, *self.pointwise, self.project]
        return [p for layer in layers for p in layer.parameters()]

    def forward(self, x: Tensor) -> Tensor:
        v = self.lift(x)
        for i, (spec, point) in enumerate(zip(self.spectral, self.pointwise)):
            v = ops.add(spec(v), point(v))
            if i < len(self.spectral) - 1:
                v = ops.gelu(v)
        return self.project(v)


@dataclass
class RunResult:
    losses: list[tuple[int, float]] = field(default_factory=list)   # (step, training loss)
    final_loss: float = float("nan")
    test_relative_l2: float = float("nan")
    backend_report: str = ""


def relative_l2(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean over samples of ||pred - target||_2 / ||target||_2 (float64)."""
    p, t = (np.asarray(a, np.float64).reshape(a.shape[0], -1) for a in (pred, target))
    return float(np.mean(np.linalg.norm(p - t, axis=1) / np.linalg.norm(t, axis=1)))


def run(session: Session, steps: int = 200, seed: int = 2026, lr: float = 0.01,
        log_every: int = 25) -> RunResult:
    result = RunResult()
    with use_session(session):
        model = FNO1d(seed)
        opt = Adam(model.parameters(), lr=lr)
        x_host, y_host = heat_data(TRAIN, seed)
        xt_host, yt_host = heat_data(TEST, seed + 1)
        x, y = tensor(x_host), tensor(y_host)
        for step in range(steps):
            opt.zero_grad()
            loss = ops.mse_loss(model(x), y)
            loss.backward()
            if step % log_every == 0 or step == steps - 1:
                result.losses.append((step, loss.item()))
            opt.step()
        result.final_loss = ops.mse_loss(model(x), y).item()
        result.test_relative_l2 = relative_l2(model(tensor(xt_host)).numpy(), yt_host)
        result.backend_report = session.backend_report()
    return result


def baseline_relative_l2(seed: int = 2026) -> float:
    """The held-out error of predicting u(T) = u0 (no model): what training must beat."""
    x, y = heat_data(TEST, seed + 1)
    return relative_l2(x[..., :1], y)


__all__ = ["FNO1d", "GRID", "RunResult", "baseline_relative_l2", "heat_data", "relative_l2", "run"]
