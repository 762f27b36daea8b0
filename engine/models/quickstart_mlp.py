"""The quickstart: linear 2->8, relu, linear 8->1 trained with Adam on the 25-point grid dataset."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import nn, ops
from engine.optim import Adam
from engine.session import Session, use_session
from engine.tensor import tensor

PROBES = ((0.0, 0.0), (0.25, -0.75))


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """The 25 points of the 5x5 grid on [-1, 1]^2 and their targets."""
    grid = np.linspace(-1.0, 1.0, 5)
    x = np.array([(a, b) for a in grid for b in grid], dtype=np.float32)
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    y = 0.8 * relu(x[:, 0] + x[:, 1]) - 0.4 * relu(x[:, 1] - x[:, 0]) + 0.2
    return x, y.astype(np.float32).reshape(-1, 1)


@dataclass
class RunResult:
    losses: list[tuple[int, float]] = field(default_factory=list)   # (step, loss) as logged
    final_loss: float = float("nan")
    predictions: list[tuple[tuple[float, float], float]] = field(default_factory=list)
    backend_report: str = ""


def parameters_host(model) -> list[np.ndarray]:
    """(w1, b1, w2, b2) as host float32 arrays."""
    return [p.numpy() for p in model.parameters()]


def run(session: Session, steps: int = 200, seed: int = 2026, lr: float = 0.03,
        log_every: int = 25, on_step=None, graph: bool = False) -> RunResult:
    """Train; `on_step(step, model, loss)` is called after each forward pass, before the update.
    `graph`: the first step runs eagerly and is captured into a CUDA graph (engine/graphs.py)
    that every later step replays; the losses are the same bits in deterministic mode."""
    result = RunResult()
    with use_session(session):
        model = nn.Sequential(nn.Linear(2, 8, seed), nn.ReLU(), nn.Linear(8, 1, seed + 2))
        opt = Adam(model.parameters(), lr=lr)
        x_host, y_host = dataset()
        x, y = tensor(x_host), tensor(y_host)
        if graph:
            _train_replayed(model, opt, x, y, steps, log_every, on_step, result)
        for step in range(0 if graph else steps):
            opt.zero_grad()
            loss = ops.mse_loss(model(x), y)
            if on_step is not None:
                on_step(step, model, loss.item())
            loss.backward()
            if step % log_every == 0 or step == steps - 1:
                result.losses.append((step, loss.item()))
            opt.step()
        result.final_loss = ops.mse_loss(model(x), y).item()
        probe = model(tensor(np.array(PROBES, dtype=np.float32))).numpy().reshape(-1)
        result.predictions = [(p, float(v)) for p, v in zip(PROBES, probe)]
        result.backend_report = session.backend_report() + (
            f"\nstep: CUDA graph replay (step 0 eager and captured, steps 1..{steps - 1} "
            "replayed)" if graph else "")
    return result


def _train_replayed(model, opt, x, y, steps, log_every, on_step, result) -> None:
    from engine.errors import GraphCaptureError
    from engine.graphs import capture
    if on_step is not None:
        raise GraphCaptureError("quickstart: on_step reads the loss inside the step, which a "
                                "CUDA graph cannot do; drop on_step or run without graph")

    def step_fn(xs, ys):
        opt.zero_grad()
        loss = ops.mse_loss(model(xs), ys)
        loss.backward()
        opt.step()
        return loss

    with capture(step_fn, (x, y)) as g:
        loss = g.warmup_outputs
        for step in range(steps):
            if step:
                loss = g.replay()
            if step % log_every == 0 or step == steps - 1:
                result.losses.append((step, loss.item()))
