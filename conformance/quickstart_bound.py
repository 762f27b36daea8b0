"""A derived bound on the quickstart MLP's loss error, for comparing providers: any evaluation whose
capsules meet their policies lands within `loss_error_bound` of the exact loss for the same
parameters, so two such evaluations (CPU and CUDA) differ by at most twice the bound.

The network, as the runtime decomposes it: z = x W1^T (matmul, k = 2) + b1 (add), r = relu(z),
o = r W2^T (matmul, k = 8) + b2 (add), L = mean((o - y)^2) over n rows. First-order forward error
analysis (Higham ch. 3), u = 2^-24, matmuls under implementation-defined order (gamma_k):
  |dz| <= gamma_2 |x||W1|^T + u(|z| + gamma_2 |x||W1|^T)           (product, then one rounded add)
  |dr| <= |dz|                                                        (relu is 1-Lipschitz)
  |do| <= |W2||dr| + gamma_8 |r||W2|^T + u(|o| + ...)                 (inherited + own rounding)
  |dL| <= gamma_{n+3} L + (1/n) sum (2 |o - y| |do| + do^2)          (mse's own rounding + inherited)
mse's gamma_{n+3}: each term rounds p - t, its square, and the sum of n non-negative terms takes
gamma_n; the division by n one more. Magnitudes are evaluated in float64 and scaled by (1 + 8u).
"""
from __future__ import annotations

import numpy as np

from conformance.error_terms import U, gamma


def _gamma(k: int) -> float:
    return float(gamma(k))


def loss_error_bound(w1, b1, w2, b2, x, y) -> float:
    w1, b1, w2, b2, x, y = (np.asarray(a, dtype=np.float64) for a in (w1, b1, w2, b2, x, y))
    z = x @ w1.T + b1
    e_mm1 = _gamma(w1.shape[1]) * (np.abs(x) @ np.abs(w1).T)
    dz = e_mm1 + U * (np.abs(z) + e_mm1)
    r = np.maximum(z, 0.0)
    o = r @ w2.T + b2
    e_mm2 = _gamma(w2.shape[1]) * (np.abs(r) @ np.abs(w2).T)
    do_inherited = dz @ np.abs(w2).T
    do = do_inherited + e_mm2 + U * (np.abs(o) + do_inherited + e_mm2)
    d = o - y
    n = d.size
    loss = float(np.mean(d * d))
    inherited = float(np.mean(2 * np.abs(d) * do + do * do))
    return (_gamma(n + 3) * loss + inherited) * (1 + 8 * U)


def exact_loss(w1, b1, w2, b2, x, y) -> float:
    """The loss evaluated in float64 (its error is far below the float32 bound)."""
    w1, b1, w2, b2, x, y = (np.asarray(a, dtype=np.float64) for a in (w1, b1, w2, b2, x, y))
    o = np.maximum(x @ w1.T + b1, 0.0) @ w2.T + b2
    return float(np.mean((o - y) ** 2))


def compare_devices(steps: int = 2, seed: int = 2026) -> list[dict]:
    """Train the quickstart on the CPU and on CUDA; per step, the two losses and the bound their
    difference must meet: each side's derived rounding bound for its own parameters, plus the
    exact (float64) loss difference that the two parameter sets cause."""
    from engine.models import quickstart_mlp
    from engine.session import Session
    x, y = quickstart_mlp.dataset()
    seen: dict[str, dict[int, tuple[float, list]]] = {"cpu": {}, "cuda": {}}
    for device in seen:
        def record(step, model, loss, _d=device):
            seen[_d][step] = (loss, quickstart_mlp.parameters_host(model))
        quickstart_mlp.run(Session(device), steps=steps, seed=seed, on_step=record)
    rows = []
    for step in range(steps):
        (l_cpu, p_cpu), (l_gpu, p_gpu) = seen["cpu"][step], seen["cuda"][step]
        rounding = loss_error_bound(*p_cpu, x, y) + loss_error_bound(*p_gpu, x, y)
        drift = abs(exact_loss(*p_cpu, x, y) - exact_loss(*p_gpu, x, y))
        rows.append({"step": step, "cpu": l_cpu, "cuda": l_gpu, "diff": abs(l_cpu - l_gpu),
                     "rounding_bound": rounding, "parameter_drift": drift,
                     "bound": rounding + drift, "ok": abs(l_cpu - l_gpu) <= rounding + drift})
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m conformance.quickstart_bound [--steps N] [--seed S]`: the table, exit 0 when
    every step's CPU/CUDA loss difference is within the bound, 1 when one exceeds it, 2 when no
    native CUDA runtime is here (the comparison needs both devices)."""
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m conformance.quickstart_bound",
                                     description="train the quickstart MLP on the CPU and on "
                                                 "CUDA and check each step's loss difference "
                                                 "against the derived bound")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default: 2)")
    parser.add_argument("--seed", type=int, default=2026, help="initialisation seed")
    args = parser.parse_args(argv)
    from engine.runtime.native import RuntimeState, probe
    state, detail = probe()
    if state is not RuntimeState.native_available:
        # Not require_native_runtime's message: its advice, `--device cpu`, is no flag of this
        # command (the comparison needs both devices).
        print(f"quickstart_bound: compares the CPU with CUDA and needs a native CUDA runtime, "
              f"which is not here ({state.value}: {detail}); run it on a machine with an NVIDIA "
              "GPU and the CUDA build (`pip install -e .[cuda13]`, or `.[cuda12]`), or train "
              "the CPU side alone with `torchlean quickstart_mlp --device cpu`", file=sys.stderr)
        return 2
    rows = compare_devices(steps=args.steps, seed=args.seed)
    print(f"{'step':>4} {'cpu loss':>14} {'cuda loss':>14} {'|diff|':>10} {'bound':>10} "
          f"{'(rounding':>10} {'+ drift)':>10}")
    for r in rows:
        print(f"{r['step']:4d} {r['cpu']:14.9g} {r['cuda']:14.9g} {r['diff']:10.3g} "
              f"{r['bound']:10.3g} {r['rounding_bound']:10.3g} {r['parameter_drift']:10.3g}"
              f"  {'ok' if r['ok'] else 'EXCEEDS'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    import sys
    sys.exit(main())
