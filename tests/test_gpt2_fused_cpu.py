"""gpt2's MLP through the fused bias_gelu op on the CPU against the composition it replaced
(fc's broadcast + add of the bias, then gelu): the same loss bit for bit, every gradient bit for bit
but fc's bias's, and that one within the bound derived below."""
from __future__ import annotations

import numpy as np

from conformance.error_terms import gamma
from engine.models import gpt2, gpt2_data
from engine.ops import LOCAL_VJP
from engine.session import Session, use_session
from engine.types import BackendOp, RuntimeEntry
from test_gpt2 import TEXT, TINY

U, U64 = 2.0 ** -24, 2.0 ** -53


def _loss_and_grads(fused: bool, monkeypatch):
    planned = gpt2._planned
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(gpt2, "_planned",
                      lambda entry: entry is not RuntimeEntry.bias_gelu and planned(entry))
        session = Session("cpu")
        with use_session(session):
            model = gpt2.GPT(TINY, 5)
            x, y = gpt2_data.Corpus(TEXT, 16).held_out(4)
            loss = model.loss(x, y)
            loss.backward()
    return (loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()},
            set(session.dispatched))


def test_fused_mlp_matches_the_composition_it_replaced(monkeypatch):
    dx = []     # what bias_gelu's rule hands fc's product, per block: the terms of fc.bias's sum
    rule = LOCAL_VJP[RuntimeEntry.bias_gelu]

    def spy(inputs, out, g, **params):
        grads = rule(inputs, out, g, **params)
        dx.append(grads[0])
        return grads
    monkeypatch.setitem(LOCAL_VJP, RuntimeEntry.bias_gelu, spy)
    fused, fused_grads, fused_ops = _loss_and_grads(True, monkeypatch)
    plain, plain_grads, plain_ops = _loss_and_grads(False, monkeypatch)
    assert RuntimeEntry.bias_gelu in fused_ops and BackendOp.gelu not in fused_ops
    assert BackendOp.gelu in plain_ops and RuntimeEntry.bias_gelu not in plain_ops
    assert len(dx) == TINY.layers
    # The forward is the same arithmetic: float32 x + b, then gelu in float64 rounded once.
    assert fused == plain
    biases = {f"h.{i}.mlp.fc.bias": dx[TINY.layers - 1 - i] for i in range(TINY.layers)}
    for name, g in fused_grads.items():
        if name not in biases:
            # dx is g gelu'(s) in float64 rounded once on both paths: what reaches every other
            # parameter is the same bits.
            assert np.array_equal(g.view(np.uint32), plain_grads[name].view(np.uint32)), name
            continue
        # Both paths sum the same float64 terms T_r = g_r gelu'(s_r) over the n rows. Fused: a
        # float64 sum (gamma64_{n-1} sum |T|), then one float32 rounding (u |db|). Composed: each
        # T_r rounded to float32 (u |T_r|), then a float32 sum in any order (gamma_{n-1} sum
        # |dx|). With sum |T| <= (1 + u) sum |dx|:
        terms = biases[name].reshape(-1, g.size).astype(np.float64)
        n = terms.shape[0]
        mass = np.abs(terms).sum(axis=0)
        bound = U * np.abs(g) + (U + gamma(n - 1) + gamma(n - 1, U64)) * mass * (1 + 2 * U)
        diff = np.abs(g.astype(np.float64) - plain_grads[name])
        assert np.all(diff <= bound), (name, float(np.max(diff - bound)))
