"""SGD and Adam, updating parameter buffers in place on their own device. On CUDA, Adam's native
kernels come from the registry (engine/registry.py's ADAM_* device rules, lent by the native-cuda
provider when it registers): the optimizers never import a provider."""
from __future__ import annotations

import math

from engine.errors import ParameterTypeError, ShapeError
from engine.ops._xp import xp_of
from engine.registry import (ADAM_BIAS_TABLE, ADAM_MULTI_TENSOR, ADAM_STEP, ADAM_STEP_TABLE,
                             device_rule)
from engine.tensor import Tensor


def _check_lr(lr: float) -> float:
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ShapeError(f"learning rate must be a positive finite number, got {lr!r}")
    return float(lr)


class Optimizer:
    def __init__(self, params: list[Tensor]) -> None:
        if isinstance(params, Tensor):   # iterable (its rows): list() would hold copies of them
            raise ParameterTypeError(f"the optimizer takes a list of parameter tensors, got one "
                                     f"Tensor of shape {params.shape}; pass [tensor]")
        self.params = list(params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class SGD(Optimizer):
    def __init__(self, params, lr: float) -> None:
        super().__init__(params)
        self.lr = _check_lr(lr)

    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                xp = xp_of(p.buffer.data)
                p.buffer.data -= xp.float32(self.lr) * p.grad.buffer.data


class Adam(Optimizer):
    """Adam (Kingma and Ba) with bias correction, float32 state; a native kernel on CUDA.

    On CUDA, `multi_tensor` (the default) steps every parameter in one launch
    (engine/providers/native_cuda/optim_multi.py) with the per-parameter kernel's arithmetic, so
    the same bits; `multi_tensor=False` launches tl_adam_step once per parameter."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 multi_tensor: bool = True) -> None:
        super().__init__(params)
        self.lr = _check_lr(lr)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.t = 0
        self.m = [xp_of(p.buffer.data).zeros_like(p.buffer.data) for p in self.params]
        self.v = [xp_of(p.buffer.data).zeros_like(p.buffer.data) for p in self.params]
        # On CUDA, from the first step a CUDA graph warms up or captures (engine/graphs.py): the
        # bias corrections and the step count on the device, so a replay takes the next step.
        self._table = None
        self.multi_tensor = bool(multi_tensor)
        self._multi = None     # the multi-tensor step's device table, built on the first step

    def _device_table(self):
        from engine.runtime.capture_state import CAPTURE
        if self._table is None and CAPTURE.recording:
            if CAPTURE.active:
                from engine.errors import GraphCaptureError
                raise GraphCaptureError(
                    "Adam.step() was captured without a warm-up step: its bias-correction table "
                    "is uploaded then; capture through engine.graphs.capture, which warms up")
            self._table = device_rule(ADAM_BIAS_TABLE)(self.beta1, self.beta2,
                                                       self.t - 1)   # advance() makes it t
        return self._table

    def device_step(self) -> int:
        """The step count: the device's once CUDA graphs replay steps (Python's `t` then stops)."""
        return self._table.device_step() if self._table is not None else self.t

    def _on_cuda(self) -> bool:
        """Whether the multi-tensor step applies: asked for, and every parameter on CUDA."""
        return self.multi_tensor and bool(self.params) and all(
            type(p.buffer.data).__module__.startswith("cupy") for p in self.params)

    def _multi_step(self, shrink: float, use_decay: bool, decay: list[bool]) -> None:
        """One multi-tensor step (AdamW's decay folded in where use_decay); a step where no
        parameter has a gradient changes nothing, as the per-parameter loop."""
        from engine.runtime.capture_state import CAPTURE
        self.t += 1
        grads = [None if p.grad is None else p.grad.buffer.data for p in self.params]
        if all(g is None for g in grads):
            return
        if self._multi is None:
            if CAPTURE.active:
                from engine.errors import GraphCaptureError
                raise GraphCaptureError(
                    "Adam.step() was captured without a warm-up step: its multi-tensor table "
                    "is uploaded then; capture through engine.graphs.capture, which warms up")
            self._multi = device_rule(ADAM_MULTI_TENSOR)([p.buffer.data for p in self.params],
                                                         self.m, self.v, decay)
        table = self._device_table()
        if table is not None:
            table.advance()
        self._multi.step([p.buffer.data for p in self.params], grads, self.lr, self.beta1,
                         self.beta2, self.eps, self.t, table, shrink, use_decay,
                         force=CAPTURE.active)

    def step(self) -> None:
        if self._on_cuda():
            self._multi_step(1.0, False, [False] * len(self.params))
            return
        self.t += 1
        table = None
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            data, g = p.buffer.data, p.grad.buffer.data
            if type(data).__module__.startswith("cupy"):
                if table is None:
                    table = self._device_table() or False
                    if table:
                        table.advance()
                if table:
                    device_rule(ADAM_STEP_TABLE)(data, g, m, v, self.lr, self.beta1,
                                                 self.beta2, self.eps, table)
                else:
                    device_rule(ADAM_STEP)(data, g, m, v, self.lr, self.beta1, self.beta2,
                                           self.eps, self.t)
                continue
            xp = xp_of(data)
            f = xp.float32
            m *= f(self.beta1)
            m += f(1 - self.beta1) * g
            v *= f(self.beta2)
            v += f(1 - self.beta2) * g * g
            m_hat = m / f(1 - self.beta1 ** self.t)
            v_hat = v / f(1 - self.beta2 ** self.t)
            data -= f(self.lr) * m_hat / (xp.sqrt(v_hat) + f(self.eps))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter; PyTorch's AdamW): each step first
    shrinks a decayed parameter by (1 - lr * weight_decay), then takes the Adam step, so the decay
    never passes through the moment estimates. `decay` (one bool per parameter, default all) says
    which parameters decay; GPT-style models leave biases, norms and embeddings out."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, decay=None, multi_tensor: bool = True) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, multi_tensor=multi_tensor)
        if not isinstance(weight_decay, (int, float)) or not math.isfinite(weight_decay) \
                or weight_decay < 0:
            raise ShapeError(f"AdamW: weight_decay must be a finite number >= 0, got "
                             f"{weight_decay!r}")
        self.weight_decay = float(weight_decay)
        self.decay = [True] * len(self.params) if decay is None else [bool(d) for d in decay]
        if len(self.decay) != len(self.params):
            raise ShapeError(f"AdamW: decay has {len(self.decay)} entries for "
                             f"{len(self.params)} parameters; give one bool per parameter")

    def step(self) -> None:
        shrink = 1.0 - self.lr * self.weight_decay
        if self._on_cuda():
            self._multi_step(shrink, bool(self.weight_decay), self.decay)
            return
        if self.weight_decay:
            for p, decays in zip(self.params, self.decay):
                if decays and p.grad is not None:
                    p.buffer.data *= xp_of(p.buffer.data).float32(shrink)
        super().step()
