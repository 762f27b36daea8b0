"""The exhaustive sweep's judgement: the campaign's own error models (conformance/error_models.py,
and the derived bounds of the op records, conformance/families/) applied to whole chunks on the sweep's device.

Those modules are written against NumPy's `np`. `on_device(fn, xp)` returns the same function
(same code object) with `np` bound to `xp` in its globals, and every conformance function it
calls bound the same way, so `error_models.compare` and the derived rules run on CuPy arrays as
they are, with no second copy of any bound to drift from the first. The few NumPy names CuPy
lacks, or where its type rules differ, come from `_Namespace`. On the CPU the namespace is NumPy
itself and the functions are the originals. The driver (__init__.py) cross-checks a sample of
every chunk with the host functions, and judges on the host every element where a float32 the
comparison converts is subnormal (CuPy's kernels flush those: refs.py).

`Tally` accumulates what the record holds: the campaign's ulp histogram (conformance/stats.py's
bins; results flushed to zero where the policy allows it are counted apart, in
flushed_accepted), the largest ulp error and its input, failures by reason, the not correctly
rounded count, NaN / infinity / signed-zero mismatches, subnormal inputs and results, and the
first counterexamples.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from conformance import error_models
from conformance.exhaustive import fused
from conformance.exhaustive.refs import f32_bits, f32_to_f64, subnormal32
from conformance.stats import ULP_EDGES, ULP_LABELS

COUNTEREXAMPLES = 1000


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


class _Namespace:
    """`np` for code running on CuPy arrays: CuPy's names, NumPy's where CuPy has none."""

    def __init__(self, xp) -> None:
        self._xp = xp

    def __getattr__(self, name):
        own = _OWN.get(name)
        if own is not None:
            return own(self._xp)
        got = getattr(self._xp, name, None)
        if got is not None:
            return got
        return getattr(np, name)   # constants and dtypes (np.float64 is CuPy's too)


def _ldexp(xp):
    # a Python float mantissa as a float64 array: CuPy could otherwise pick a float16 loop
    return lambda m, e: xp.ldexp(xp.asarray(m, dtype=np.float64) if isinstance(m, float) else m,
                                 e)


def _nan_to_num(xp):
    def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
        x = xp.asarray(x)
        info = np.finfo(x.dtype)
        big = info.max if posinf is None else posinf
        small = info.min if neginf is None else neginf
        return xp.where(xp.isnan(x), nan, xp.where(x == np.inf, big,
                                                   xp.where(x == -np.inf, small, x)))
    return nan_to_num


_OWN = {"errstate": lambda xp: np.errstate, "shape": lambda xp: np.shape,
        "isposinf": lambda xp: (lambda x: x == np.inf),
        "isneginf": lambda xp: (lambda x: x == -np.inf),
        "ldexp": _ldexp, "nan_to_num": _nan_to_num}


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _rebind(fn, ns, memo: dict):
    if fn in memo:
        return memo[fn]
    glb = dict(fn.__globals__)
    new = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    memo[fn] = new
    glb["np"] = ns
    for name in _code_names(fn.__code__):
        val = glb.get(name)
        if isinstance(val, types.FunctionType) and val.__module__.startswith("conformance."):
            glb[name] = _rebind(val, ns, memo)
        elif isinstance(val, types.ModuleType) and val.__name__.startswith("conformance."):
            glb[name] = _ModuleView(val, ns, memo)
        elif _is_rule_table(val):   # a table a function reads directly (families.rule_for)
            glb[name] = {k: _rule_view(v, ns, memo) for k, v in val.items()}
    return new


def _is_rule_table(val) -> bool:
    """A dict of derived rules (each with a `bound`); _rule_view rebinds those whose bound is a
    plain function and leaves the others as they are."""
    return isinstance(val, dict) and bool(val) and all(hasattr(v, "bound") for v in val.values())


class _ModuleView:
    """A conformance module whose functions are looked up rebound (`rounding.ulp_array`)."""

    def __init__(self, module, ns, memo) -> None:
        self._module, self._ns, self._memo = module, ns, memo

    def __getattr__(self, name):
        val = getattr(self._module, name)
        if isinstance(val, types.FunctionType):
            return _rebind(val, self._ns, self._memo)
        if isinstance(val, dict):   # rule tables: their DerivedRules' bounds are rebound
            return {k: _rule_view(v, self._ns, self._memo) for k, v in val.items()}
        return val


def _rule_view(rule, ns, memo):
    bound = getattr(rule, "bound", None)
    if isinstance(bound, types.FunctionType):
        import dataclasses
        return dataclasses.replace(rule, bound=_rebind(bound, ns, memo))
    return rule


_BOUND: dict = {}


def on_device(fn, xp):
    """fn with NumPy replaced by xp throughout (the original when xp is NumPy)."""
    if xp is np:
        return fn
    key = (fn, id(xp))
    if key not in _BOUND:
        _BOUND[key] = _rebind(fn, _Namespace(xp), {})
    return _BOUND[key]


@dataclass
class DeviceRef:
    """The fields of a references._common.Reference the error models read, as device arrays."""
    value: object
    exact: object
    magnitude: object = None
    terms: object = None
    kind: str = "composite"


def compare(xp, model, ref: DeviceRef, got, ctx) -> error_models.Verdict:
    return on_device(error_models.compare, xp)(model, ref, got, ctx)


class Tally:
    """One output's (forward or VJP) sweep statistics."""

    def __init__(self) -> None:
        self.elements = 0
        self.failed = 0
        self.reasons: dict[str, int] = {}
        self.hist = np.zeros(len(ULP_LABELS), np.int64)
        self.max_ulps = 0.0
        self.max_ulps_input: str | None = None
        self.not_correctly_rounded = 0
        self.nan_mismatch = self.inf_mismatch = self.signed_zero_mismatch = 0
        self.subnormal_inputs = self.subnormal_inputs_failed = 0
        self.subnormal_results = self.subnormals_preserved = self.subnormals_flushed = 0
        self.overflow_admissible = 0
        self.inputs_flushed = 0
        self.flushed_accepted = 0
        self.counterexamples: list[dict] = []

    def add(self, xp, bits, got, ref: DeviceRef, verdict) -> None:
        ok = verdict.ok.reshape(-1)
        n = int(ok.size)
        self.elements += n
        bad = ~ok
        ulps = verdict.ulps.reshape(-1)
        one_kernel = fused.enabled(xp)
        if one_kernel:       # every count below from one kernel (fused.tally)
            t = fused.tally(xp, ok, ulps, ref.value.reshape(-1), got.reshape(-1))
            nbad = t["failed"]
        else:
            nbad = int(xp.count_nonzero(bad))
        self.failed += nbad
        if nbad:
            codes = xp.bincount(verdict.reason.reshape(-1)[bad].astype(np.int64),
                                minlength=len(error_models.REASONS))
            for i, c in enumerate(codes.tolist()):
                if c:
                    name = error_models.REASONS[i]
                    self.reasons[name] = self.reasons.get(name, 0) + int(c)
        if one_kernel:
            self.flushed_accepted += t["flushed"]
            self.hist += np.asarray(t["hist"], np.int64)
            # the input of the largest error only where it may replace the one kept
            worst = t["worst"]
            if worst is not None and (worst < 0 or worst > self.max_ulps or
                                      self.max_ulps_input is None):
                live = xp.isfinite(ulps) & ~self._flushed(xp, ok, ref, got)
                self._worst(xp, bits, ulps, live)
            self.not_correctly_rounded += t["ncr"]
            self.nan_mismatch += t["nan"]
            self.inf_mismatch += t["inf"]
            self.signed_zero_mismatch += t["signed_zero"]
        else:
            flushed = self._flushed(xp, ok, ref, got)
            self.flushed_accepted += int(xp.count_nonzero(flushed))
            live = xp.isfinite(ulps) & ~flushed
            idx = xp.searchsorted(xp.asarray(ULP_EDGES), ulps[live], side="left")
            self.hist += _host(xp.bincount(xp.minimum(idx, len(ULP_LABELS) - 1),
                                           minlength=len(ULP_LABELS)))
            if bool(live.any()):
                self._worst(xp, bits, ulps, live)
        v = y = None
        if not one_kernel:
            v, y = ref.value.reshape(-1), got.reshape(-1)
            v, y = f32_to_f64(xp, v), f32_to_f64(xp, y)   # exact: CuPy flushes float32 compares
            nan_v, nan_y = xp.isnan(v), xp.isnan(y)
            both = ~nan_v & ~nan_y
            self.not_correctly_rounded += int(xp.count_nonzero(both & (v != y)))
            self.nan_mismatch += int(xp.count_nonzero(nan_v != nan_y))
            self.inf_mismatch += int(xp.count_nonzero(
                both & (xp.isinf(v) | xp.isinf(y)) & (v != y)))
            self.signed_zero_mismatch += int(xp.count_nonzero(
                both & (v == 0) & (y == 0) & (xp.signbit(v) != xp.signbit(y))))
        obs = verdict.observed
        self.subnormal_results += int(obs.get("subnormal_results", 0))
        self.subnormals_preserved += int(obs.get("subnormals_preserved", 0))
        self.subnormals_flushed += int(obs.get("subnormals_flushed", 0))
        self.overflow_admissible += int(obs.get("overflow_admissible", 0))
        room = COUNTEREXAMPLES - len(self.counterexamples)
        if nbad and room > 0:
            if v is None:
                v, y = f32_to_f64(xp, ref.value.reshape(-1)), f32_to_f64(xp, got.reshape(-1))
            where = xp.flatnonzero(bad)[:room]
            self._keep(xp, where, bits, y, v, ulps, verdict.reason.reshape(-1))

    @staticmethod
    def _flushed(xp, ok, ref: DeviceRef, got):
        """A subnormal result flushed to zero where the policy allows it: counted apart, out of
        the histogram and the maximum (its distance, up to 2^23 ulps of the subnormal grid,
        says nothing about the function)."""
        return ok & subnormal32(xp, ref.value.reshape(-1)) & \
            (f32_bits(xp, got.reshape(-1)) & np.uint32(0x7FFFFFFF) == 0)

    def _worst(self, xp, bits, ulps, live) -> None:
        masked = xp.where(live, ulps, -1.0)
        at = int(xp.argmax(masked))
        worst = float(masked[at])
        if worst > self.max_ulps or self.max_ulps_input is None:
            self.max_ulps = max(self.max_ulps, worst)
            self.max_ulps_input = f"0x{int(bits[at]):08x}"

    def add_same(self, xp, bits, v, same) -> None:
        """Elements equal to the correctly rounded reference: 0 ulps, passing every model."""
        n = int(xp.count_nonzero(same))
        self.elements += n
        self.hist[0] += n
        sub = same & subnormal32(xp, v)
        k = int(xp.count_nonzero(sub))
        self.subnormal_results += k
        self.subnormals_preserved += k
        if n and self.max_ulps_input is None:
            self.max_ulps_input = f"0x{int(bits[int(xp.argmax(same))]):08x}"

    def add_inputs(self, xp, x, ok) -> None:
        sub_in = subnormal32(xp, x)
        self.subnormal_inputs += int(xp.count_nonzero(sub_in))
        self.subnormal_inputs_failed += int(xp.count_nonzero(sub_in & ~ok))

    def _keep(self, xp, where, bits, y, v, ulps, reason) -> None:
        host = [_host(a[where]) for a in (bits, y, v, ulps, reason)]
        for b, got, exp, u, code in zip(*host):
            self.counterexamples.append({
                "input": f"0x{int(b):08x}", "input_value": repr(float(np.uint32(b).view(
                    np.float32))), "got": repr(float(got)), "expected": repr(float(exp)),
                "ulps": float(u) if np.isfinite(u) else None,
                "reason": error_models.REASONS[int(code)]})

    def merge(self, other: "Tally") -> None:
        """Add another shard's tally (its counterexamples after this one's, up to the cap)."""
        for name in ("elements", "failed", "not_correctly_rounded", "nan_mismatch",
                     "inf_mismatch", "signed_zero_mismatch", "subnormal_inputs",
                     "subnormal_inputs_failed", "subnormal_results", "subnormals_preserved",
                     "subnormals_flushed", "overflow_admissible", "inputs_flushed",
                     "flushed_accepted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, v in other.reasons.items():
            self.reasons[k] = self.reasons.get(k, 0) + v
        self.hist += other.hist
        if other.max_ulps_input is not None and (self.max_ulps_input is None or
                                                 other.max_ulps > self.max_ulps):
            self.max_ulps, self.max_ulps_input = other.max_ulps, other.max_ulps_input
        self.counterexamples += other.counterexamples[:COUNTEREXAMPLES -
                                                      len(self.counterexamples)]

    @property
    def passed(self) -> bool:
        return self.failed == 0

    def to_json(self) -> dict:
        return {"elements": self.elements, "failed": self.failed, "reasons": self.reasons,
                "max_ulps": self.max_ulps, "max_ulps_input": self.max_ulps_input,
                "ulp_histogram": dict(zip(ULP_LABELS, (int(h) for h in self.hist))),
                "not_correctly_rounded": self.not_correctly_rounded,
                "nan_mismatch": self.nan_mismatch, "inf_mismatch": self.inf_mismatch,
                "signed_zero_mismatch": self.signed_zero_mismatch,
                "subnormal_inputs": self.subnormal_inputs,
                "subnormal_inputs_failed": self.subnormal_inputs_failed,
                "subnormal_results": self.subnormal_results,
                "subnormals_preserved": self.subnormals_preserved,
                "subnormals_flushed": self.subnormals_flushed,
                "overflow_admissible": self.overflow_admissible,
                "inputs_flushed": self.inputs_flushed,
                "flushed_accepted": self.flushed_accepted,
                "counterexamples": self.counterexamples}
