"""The exhaustive sweep of one capsule: every float32 input of a unary elementwise capsule,
forward and VJP (unit cotangent), judged by the capsule's own error models (docs/EXHAUSTIVE.md;
the command is conformance/exhaustive/cli.py).

On `--device cuda` the 2^32 bit patterns are built on the GPU from an iota, chunk by chunk (the
signalling and quiet NaNs once per sign: 4 patterns stand for 2^24 - 2; plan.py),
run through the registry's handler (the campaign's call: real kernel, allocations poisoned,
every array handed to it compared after the call), decided by the certified float64 references of refs.py, the
undecided inputs by the op's mpmath oracle on the host, and judged on the device by
error_models.compare itself (judge.py). A capsule that passes on every input is
recorded `passed` in <evidence-dir>/exhaustive-<capsule>.json, bound to its build fingerprint,
the harness digest and the GPU, driver and CUDA runtime: conformance/trust.py's `verified` rule.
`--device cpu --stride K` runs the same sweep on every K-th pattern with NumPy (a sampled sweep,
never `verified`). Several visible GPUs each take one shard of the chunks; with `--cluster`
each Dask worker takes one (sweep_shard, merged by merge_shards: conformance/cluster/exhaustive.py).
"""
from __future__ import annotations

import datetime as _dt
import threading
import time

import numpy as np

from conformance import error_models
# The submodules by their own names: a name this package imports from one must never be a
# submodule's name (`from conformance.exhaustive import plan` is the module, plan.plan the
# function).
from conformance.exhaustive import fused, plan
from conformance.exhaustive.judge import DeviceRef, Tally, compare, on_device
from conformance.exhaustive.plan import (CHUNK, CPU_CHUNK, NAN_CLASSES, RECORD_VERSION,
                                         patterns_checked, shards)
from conformance.exhaustive.refs import evaluate, f32_bits, formulas, subnormal32
from conformance.formats import EXHAUSTIVE_FORMAT

ORACLE_BUDGET = 1 << 21              # undecided inputs per output the host oracle may take
SPOT_CHECKS = 64                     # decided inputs per chunk re-decided by mpmath
JUDGE_CHECKS = 256                   # elements per chunk the host error model re-judges
CROSS_CHECK_ON_CPU = False           # tests turn it on: the host compares itself, the code runs


class _Side:
    """One output's tallies and its reference bookkeeping."""

    def __init__(self, formula, model) -> None:
        self.formula, self.model = formula, model
        self.tally = Tally()
        self.to_mpmath = 0
        self.bound_checked = 0
        self.bound_worst = 0.0          # worst |v64 - exact| / (bound |exact|) seen at mpmath
        self.spot_checked = self.spot_disagreed = 0
        self.judge_checked = self.judge_disagreed = 0
        self.problems: list[str] = []

    def reference_json(self) -> dict:
        return {"formula": self.formula.reason, "to_mpmath": self.to_mpmath,
                "bound_audit": {"checked": self.bound_checked, "worst_ratio": self.bound_worst},
                "spot_check": {"checked": self.spot_checked, "disagreed": self.spot_disagreed},
                "judge_cross_check": {"checked": self.judge_checked,
                                      "disagreed": self.judge_disagreed},
                "model": self.model.to_json(), "problems": self.problems[:10]}


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _host_reference(op: str, x: np.ndarray, vjp: bool):
    from conformance.references import get as get_reference
    ref = get_reference(op)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if vjp:
        return ref.vjp((x,), np.ones_like(x))[0]
    return ref.forward((x,))


def _reference(xp, side: _Side, op: str, x, vjp: bool, rng):
    """(DeviceRef) of one chunk: certified on the device, the rest (and the specials) by mpmath."""
    v32, v64, decided = evaluate(xp, side.formula, x)
    b = f32_bits(xp, x) & np.uint32(0x7FFFFFFF)
    special = (b == 0) | (b >= np.uint32(0x7F800000))   # zeros, infinities, NaNs
    decided = decided & ~special
    todo = xp.flatnonzero(~decided)
    n = int(todo.size)
    side.to_mpmath += n
    if side.to_mpmath > ORACLE_BUDGET:
        raise _Incomplete(f"the float64 reference left more than {ORACLE_BUDGET} inputs "
                          "undecided: beyond the host oracle's budget")
    if n:
        v32, v64 = v32.copy(), v64.copy()      # written below; a formula may return its input
        xs = _host(x[todo])
        r = _host_reference(op, xs, vjp)
        if not side.formula.exact:
            _audit_bound(xp, side, x, todo, v64, r, special)
        v32[todo] = xp.asarray(r.value)
        v64[todo] = xp.asarray(r.exact)
    live = int(x.size) - n
    if live:
        k = rng.integers(0, live, min(SPOT_CHECKS, live))
        pick = xp.asarray(_outside(_host(todo), k))    # flatnonzero(decided)[k], not built
        r = _host_reference(op, _host(x[pick]), vjp)
        want, got = r.value, _host(v32[pick])
        same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
        side.spot_checked += int(pick.size)
        bad = int(np.count_nonzero(~same))
        if bad:
            side.spot_disagreed += bad
            side.problems.append(f"the certified reference disagrees with mpmath at input "
                                 f"0x{int(_host(x[pick]).view(np.uint32)[~same][0]):08x}")
    return DeviceRef(v32, v64, kind="composite")


def _outside(skip, k):
    """The k-th index (each of k, from 0) not in skip (sorted, unique): flatnonzero of skip's
    complement indexed by k, without that array (a chunk's worth of indices for 64 picks).
    skip_i - i, nondecreasing, counts the indices outside skip before skip_i."""
    skip = np.asarray(skip, np.int64)
    k = np.asarray(k, np.int64)
    return k + np.searchsorted(skip - np.arange(skip.size), k, side="right")


def _audit_bound(xp, side, x, todo, v64, r, special) -> None:
    """At the inputs mpmath decided, the float64 value must lie within its stated bound."""
    sel = ~_host(special[todo])
    exact = np.asarray(r.exact, np.float64)
    approx = _host(v64[todo])
    with np.errstate(all="ignore"):
        _, bound = side.formula.evaluate(np, _host(x[todo]).astype(np.float64))
    bound = np.broadcast_to(np.asarray(bound, np.float64), exact.shape)
    ok = sel & np.isfinite(exact) & np.isfinite(approx) & (np.abs(exact) >= 2.0 ** -1000) & \
        np.isfinite(bound)
    if not np.any(ok):
        return
    with np.errstate(all="ignore"):
        ratio = np.abs(approx[ok] - exact[ok]) / (bound[ok] * np.abs(exact[ok]))
    side.bound_checked += int(ok.sum())
    worst = float(ratio.max())
    side.bound_worst = max(side.bound_worst, worst)
    if worst > 1.0:
        at = _host(x[todo])[ok][np.argmax(ratio)].view(np.uint32)
        side.problems.append(f"the float64 reference broke its stated bound ({worst:.3g} x) at "
                             f"input 0x{int(at):08x}")


class _Incomplete(Exception):
    pass


def _subset(kw: dict, idx, n: int, move=lambda a: a) -> dict:
    """A BoundContext's keyword arrays (full chunk length n) at the elements idx."""
    out = {}
    for k, v in kw.items():
        if isinstance(v, DeviceRef):
            out[k] = DeviceRef(move(v.value[idx]), move(v.exact[idx]))
        elif getattr(v, "shape", None) == (n,):
            out[k] = move(v[idx])
        else:
            out[k] = v
    return out


def _cross_check(xp, side, capsule, x, got, ref, ok, kw, rng) -> None:
    """Re-judge failing and random elements with the host error model (device run only)."""
    if xp is np and not CROSS_CHECK_ON_CPU:
        return
    failing = xp.flatnonzero(~ok)[:JUDGE_CHECKS]
    rand = xp.asarray(rng.integers(0, int(ok.size), JUDGE_CHECKS))
    idx = xp.concatenate([failing, rand])
    ref_h = DeviceRef(_host(ref.value[idx]), _host(ref.exact[idx]))
    ctx = error_models.BoundContext(capsule.op, (_host(x[idx]),), {}, capsule.numerical_policy,
                                    **_subset(kw, idx, int(ok.size), _host))
    again = error_models.compare(side.model, ref_h, _host(got[idx]), ctx)
    if side.model.flush_allowed:
        _accept_flushed_inputs(capsule, side, ctx.inputs[0], _host(got[idx]), again, ctx,
                               count=False)
    side.judge_checked += int(idx.size)
    bad = int(np.count_nonzero(again.ok != _host(ok[idx])))
    if bad:
        side.judge_disagreed += bad
        side.problems.append(f"the device judgement disagrees with the host error model on "
                             f"{bad} element(s)")


def _judge(xp, side, capsule, bits, x, got, ref, kw, rng) -> None:
    """Judge one output of a chunk. An output equal bit for bit to the correctly rounded
    reference (or NaN where it is NaN, and not the poison bits) passes every error model (see
    error_models.compare: each failure needs y != v), so only the others are compared: on the
    device, except where a float32 the comparison converts (input, output, reference value, the
    forward output a VJP bound reads) is subnormal: CuPy's kernels would flush it (module
    refs.py), so those few are judged on the host. On CuPy the pre-filter and its counts
    are one kernel (fused.classify); elsewhere the array code below."""
    from engine.runtime.poison import POISON_BITS
    if fused.enabled(xp):
        return _judge_fused(xp, side, capsule, bits, x, got, ref, kw, rng)
    ybits = f32_bits(xp, got)
    poison = ybits == np.uint32(POISON_BITS)
    same = ((f32_bits(xp, ref.value) == ybits) | (xp.isnan(ref.value) & xp.isnan(got))) & \
        ~poison
    side.tally.add_same(xp, bits, ref.value, same)
    ok = xp.ones(x.shape, bool)
    risky = subnormal32(xp, x) | subnormal32(xp, got) | subnormal32(xp, ref.value)
    if "out" in kw and kw["out"] is not got:
        risky |= subnormal32(xp, kw["out"])
    poisoned = bool(poison.any())
    for on_host in (False, True):
        cand = xp.flatnonzero(~same & (risky if on_host else ~risky))
        if int(cand.size):
            verdict = _compare_part(xp, side, capsule, bits, x, got, ref, kw, cand, on_host,
                                    poisoned)
            ok[cand] = xp.asarray(verdict.ok)
    side.tally.add_inputs(xp, x, ok)
    _cross_check(xp, side, capsule, x, got, ref, ok, kw, rng)


def _judge_fused(xp, side, capsule, bits, x, got, ref, kw, rng) -> None:
    """_judge on CuPy: the same classes and counts from one kernel and one host sync."""
    from engine.runtime.poison import POISON_BITS
    out = kw.get("out")
    code, n = fused.classify(xp, x, got, ref.value,
                                        None if out is None or out is got else out, POISON_BITS)
    tally = side.tally                     # Tally.add_same's counts
    tally.elements += n["same"]
    tally.hist[0] += n["same"]
    tally.subnormal_results += n["same_subnormal"]
    tally.subnormals_preserved += n["same_subnormal"]
    if n["same"] and tally.max_ulps_input is None:
        tally.max_ulps_input = f"0x{int(bits[int(xp.argmax(code == 0))]):08x}"
    ok = xp.ones(x.shape, bool)
    failed_subnormal = 0                   # Tally.add_inputs's, counted where ok can be False
    for on_host, k, name in ((False, 1, "device"), (True, 2, "host")):
        if n[name]:
            cand = xp.flatnonzero(code == k)
            verdict = _compare_part(xp, side, capsule, bits, x, got, ref, kw, cand, on_host,
                                    n["poison"] > 0)
            ok[cand] = xp.asarray(verdict.ok)
            ns = np if on_host else xp
            sub = subnormal32(ns, _host(x[cand]) if on_host else x[cand])
            failed_subnormal += int(ns.count_nonzero(sub & ~verdict.ok))
    tally.subnormal_inputs += n["subnormal_inputs"]
    tally.subnormal_inputs_failed += failed_subnormal
    _cross_check(xp, side, capsule, x, got, ref, ok, kw, rng)


def _compare_part(xp, side, capsule, bits, x, got, ref, kw, cand, on_host: bool,
                  poisoned: bool):
    """The error model over the elements cand of a chunk (on the host or the device), tallied;
    returns the verdict."""
    from engine.runtime.poison import POISON_BITS
    move = _host if on_host else (lambda a: a)
    ns = np if on_host else xp
    sref = DeviceRef(move(ref.value[cand]), move(ref.exact[cand]))
    xs, ys = move(x[cand]), move(got[cand])
    ctx = error_models.BoundContext(capsule.op, (xs,), {}, capsule.numerical_policy,
                                    **_subset(kw, cand, int(x.size), move))
    verdict = compare(ns, side.model, sref, ys, ctx)
    if poisoned:
        on_device(error_models.mark_poison, ns)(verdict,
                                                f32_bits(ns, ys) == np.uint32(POISON_BITS))
    if on_host and side.model.flush_allowed:
        _accept_flushed_inputs(capsule, side, xs, ys, verdict, ctx)
    side.tally.add(ns, move(bits[cand]), ys, sref, verdict)
    return verdict


def _accept_flushed_inputs(capsule, side, xs, ys, verdict, ctx, count: bool = True) -> None:
    """As the campaign does under a policy that lets subnormals be flushed: a subnormal input
    may be read as the same-signed zero (DAZ); a failing element that passes against the
    reference at that zero is accepted, and counted (observed inputs_flushed)."""
    sub = subnormal32(np, xs) & ~verdict.ok
    if not sub.any():
        return
    zeros = np.where(np.signbit(xs[sub]), np.float32(-0.0), np.float32(0.0))
    vjp = ctx.g is not None
    daz = _host_reference(capsule.op.label, zeros, vjp)
    sub_ctx = error_models.BoundContext(ctx.op, (zeros,), {}, ctx.policy, **_subset(
        {k: getattr(ctx, k) for k in ("out", "fwd_ref", "g")}, np.flatnonzero(sub), sub.size))
    if vjp:
        sub_ctx.fwd_ref = _host_reference(capsule.op.label, zeros, False)
    again = error_models.compare(side.model, daz, ys[sub], sub_ctx)
    idx = np.flatnonzero(sub)[again.ok]
    verdict.ok[idx] = True
    verdict.reason[idx] = 0
    verdict.ulps[idx] = again.ulps[again.ok]
    if count:
        side.tally.inputs_flushed += int(idx.size)


def _poisoning():
    from engine.runtime.poison import poisoned
    return poisoned()


def _run_chunk(*args) -> None:
    with np.errstate(all="ignore"):   # NumPy warns on every NaN cast; the verdict says more
        _judge_chunk(*args)


class _KernelFinding(Exception):
    """The kernel raised, or returned something that is not one float32 per input: a verdict
    about the kernel (the capsule fails), not a harness error."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _call(what: str, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:   # a kernel that raises on a valid input is a finding
        raise _KernelFinding("raised" if what == "forward" else "vjp-raised",
                             f"the {what} raised {type(exc).__name__}: {exc}"[:500]) from exc


def _as_output(xp, out, n: int, what: str):
    """The kernel's result as a flat float32 device array of n elements, or a finding."""
    if isinstance(out, (tuple, list)):
        out = out[0] if len(out) == 1 else None
    dtype = getattr(out, "dtype", None)
    if out is None or dtype != np.float32 or int(getattr(out, "size", -1)) != n:
        raise _KernelFinding("wrong-type", f"the {what} returned "
                             f"{type(out).__name__} of dtype {dtype} and "
                             f"{getattr(out, 'size', '?')} elements; expected {n} float32")
    return xp.ascontiguousarray(xp.asarray(out)).reshape(-1)


def _unchanged(xp, handed: dict, side: _Side, reason: str) -> None:
    """Every array handed to the kernel still holds its bits; else a failure of that reason."""
    for name, (arr, bits) in handed.items():
        if not bool(xp.array_equal(f32_bits(xp, arr), bits)):
            side.tally.failed += 1
            side.tally.reasons[reason] = side.tally.reasons.get(reason, 0) + 1
            side.tally.counterexamples.append({"input": name, "reason": reason})


def _judge_chunk(xp, chunk, capsule, handler, vjp_fn, fwd: _Side, bwd: _Side | None, rng):
    op = capsule.op.label
    bits = chunk.bits(xp)
    x = bits.view(np.float32)          # the harness's copy; the kernel gets its own
    handed = x.copy()
    with _poisoning():
        out = _as_output(xp, _call("forward", handler.forward, handed), x.size, "forward")
    _unchanged(xp, {"input[0]": (handed, bits)}, fwd, "input-mutated")
    ref = _reference(xp, fwd, op, x, False, rng)
    _judge(xp, fwd, capsule, bits, x, out, ref, {"out": out, "fwd_ref": ref}, rng)
    if bwd is None:
        return
    g = xp.ones(x.shape, np.float32)
    handed, out_given, g_given = x.copy(), out.copy(), g.copy()
    with _poisoning():
        grad = _as_output(xp, _call("VJP", vjp_fn, (handed,), out_given, g_given), x.size,
                          "VJP")
    _unchanged(xp, {"input[0]": (handed, bits), "output": (out_given, f32_bits(xp, out)),
                    "grad_out": (g_given, f32_bits(xp, g))}, bwd, "vjp-input-mutated")
    gref = _reference(xp, bwd, op, x, True, rng)
    _judge(xp, bwd, capsule, bits, x, grad, gref,
           {"out": out, "fwd_ref": ref, "g": g, "input_index": 0}, rng)


def _models(capsule, handler):
    from conformance.vjp import vjp_callable
    op = capsule.op.label
    probe = np.array([0.5], np.float32)
    fwd_kind = _host_reference(op, probe, False).kind
    fwd_model = error_models.forward_model(capsule, fwd_kind)
    vjp_fn = vjp_callable(capsule, handler) if formulas(op).vjp is not None else None
    vjp_model = None
    if vjp_fn is not None:
        vjp_model = error_models.vjp_model(capsule, _host_reference(op, probe, True).kind)
    return fwd_model, vjp_fn, vjp_model


def chunk_plan(device: str, stride: int, chunk: int | None = None):
    """The sweep's chunks: GPU-sized on cuda, small on the CPU."""
    return plan.plan(stride, chunk or (CHUNK if device == "cuda" else CPU_CHUNK))


def _new_sides(capsule, fwd_model, vjp_model) -> tuple[_Side, _Side | None]:
    refs = formulas(capsule.op.label)
    return (_Side(refs.forward, fwd_model),
            None if vjp_model is None else _Side(refs.vjp, vjp_model))


def _run_part(xp, capsule, handler, vjp_fn, part, sides, index: int, gpu=None) -> None:
    """One shard's chunks into its sides; `gpu` selects the device of a multi-GPU local run.
    The spot checks' generator is seeded by the shard's index, wherever the shard runs."""
    rng = np.random.default_rng(index)
    fwd, bwd = sides
    with (xp.cuda.Device(gpu) if gpu is not None else _Null()):
        for c in part:
            _run_chunk(xp, c, capsule, handler, vjp_fn, fwd, bwd, rng)


def _ending(exc: BaseException):
    """How a shard stopped early, as data (a Dask task returns it): ("incomplete", message) or
    ("failed", reason, message) for a kernel finding; other exceptions are not endings."""
    if isinstance(exc, _Incomplete):
        return ("incomplete", str(exc))
    if isinstance(exc, _KernelFinding):
        return ("failed", exc.reason, str(exc))
    raise exc


def sweep_capsule(capsule, handler, device: str, stride: int, devices: int = 1,
                  chunk: int | None = None, xp=None) -> dict:
    """Sweep one capsule; returns its record (not yet written). `xp` replaces the device's array
    module (tests run the device path on the CPU with a flushing stand-in for CuPy)."""
    t0 = time.perf_counter()
    fwd_model, vjp_fn, vjp_model = _models(capsule, handler)
    chunks = chunk_plan(device, stride, chunk)
    parts = shards(chunks, devices if device == "cuda" else 1)
    results = [_new_sides(capsule, fwd_model, vjp_model) for _ in parts]
    errors: list[BaseException] = []
    array_module = xp

    def work(i: int) -> None:
        gpu = i if device == "cuda" and len(parts) > 1 else None
        _run_part(array_module or _xp(device), capsule, handler, vjp_fn, parts[i], results[i],
                  i, gpu)

    ending = None
    try:
        if len(parts) == 1:
            work(0)
        else:
            threads = [threading.Thread(target=_catching, args=(work, i, errors))
                       for i in range(len(parts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
    except (_Incomplete, _KernelFinding) as exc:
        ending = _ending(exc)
    return finish(capsule, handler, device, stride, chunks, results, ending,
                  time.perf_counter() - t0)


def sweep_shard(capsule, handler, device: str, stride: int, index: int, count: int,
                chunk: int | None = None) -> dict:
    """Shard `index` of `count` of a capsule's sweep, on this process's (first) device: the work
    of one Dask task (conformance/cluster/exhaustive.py). Returns its sides' state, how it ended,
    its patterns and seconds; merge_shards() turns every shard's result into the record."""
    t0 = time.perf_counter()
    fwd_model, vjp_fn, vjp_model = _models(capsule, handler)
    part = shards(chunk_plan(device, stride, chunk), count)[index]
    sides = _new_sides(capsule, fwd_model, vjp_model)
    ending = None
    try:
        _run_part(_xp(device), capsule, handler, vjp_fn, part, sides, index)
    except (_Incomplete, _KernelFinding) as exc:
        ending = _ending(exc)
    state = [None if s is None else {k: v for k, v in vars(s).items()
                                     if k not in ("formula", "model")} for s in sides]
    return {"index": index, "sides": state, "ending": ending,
            "patterns": patterns_checked(part), "seconds": time.perf_counter() - t0}


def merge_shards(capsule, handler, device: str, stride: int, outs: list[dict], seconds: float,
                 chunk: int | None = None) -> dict:
    """The record of a sweep whose shards ran elsewhere (sweep_shard's results, every shard's):
    their sides rebuilt and merged exactly as sweep_capsule merges its threads'."""
    fwd_model, _, vjp_model = _models(capsule, handler)
    results = []
    for out in sorted(outs, key=lambda o: o["index"]):
        sides = _new_sides(capsule, fwd_model, vjp_model)
        for side, state in zip(sides, out["sides"]):
            if side is not None:
                vars(side).update(state)
        results.append(sides)
    ending = next((o["ending"] for o in sorted(outs, key=lambda o: o["index"])
                   if o["ending"]), None)
    return finish(capsule, handler, device, stride, chunk_plan(device, stride, chunk), results,
                  ending, seconds)


def finish(capsule, handler, device: str, stride: int, chunks, results, ending,
           seconds: float) -> dict:
    """The record from every shard's sides (merged by _merge) and how the sweep ended."""
    from conformance import evidence
    from conformance.fingerprint import fingerprint, harness_digest
    status, message = "passed", ""
    if ending and ending[0] == "incomplete":
        status, message = "incomplete", ending[1]
    elif ending:
        reason = ending[1]
        status, message = "failed", ending[2]
        side = results[0][1] if reason.startswith("vjp-") and results[0][1] else results[0][0]
        side.tally.failed += 1
        side.tally.reasons[reason] = side.tally.reasons.get(reason, 0) + 1
    fwd, bwd = _merge([r[0] for r in results]), _merge([r[1] for r in results])
    problems = fwd.problems + (bwd.problems if bwd else [])
    if status in ("passed", "failed") and problems:
        status, message = "harness-error", problems[0]
    elif status == "passed" and not (fwd.tally.passed and (bwd is None or bwd.tally.passed)):
        status = "failed"
        message = "; ".join(f"{k}: {v}" for side in (fwd, bwd) if side
                            for k, v in side.tally.reasons.items())
    env = evidence.environment(device)
    return {
        "format": EXHAUSTIVE_FORMAT, "version": RECORD_VERSION,
        "capsule": evidence.capsule_record(capsule),
        "mode": "exhaustive" if stride == 1 else "sampled", "stride": stride, "device": device,
        "status": status, "message": message,
        "patterns": {"checked": patterns_checked(chunks), "nan_classes": dict(
            (k, f"0x{v:08x}") for k, v in NAN_CLASSES.items())},
        "chunks": len(chunks), "shards": len(results),
        "forward": fwd.tally.to_json(), "vjp": None if bwd is None else bwd.tally.to_json(),
        "vjp_note": None if bwd is not None else "no VJP to sweep for this capsule",
        "reference": {"forward": fwd.reference_json(),
                      "vjp": None if bwd is None else bwd.reference_json()},
        "seconds": round(seconds, 3),
        "fingerprint": fingerprint(capsule, handler),
        "harness": harness_digest(),
        "environment": env,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _catching(fn, i, errors) -> None:
    try:
        fn(i)
    except BaseException as exc:   # re-raised in the calling thread
        errors.append(exc)


def _merge(sides):
    sides = [s for s in sides if s is not None]
    if not sides:
        return None
    out = sides[0]
    for s in sides[1:]:
        out.tally.merge(s.tally)
        for name in ("to_mpmath", "bound_checked", "spot_checked", "spot_disagreed",
                     "judge_checked", "judge_disagreed"):
            setattr(out, name, getattr(out, name) + getattr(s, name))
        out.bound_worst = max(out.bound_worst, s.bound_worst)
        out.problems += s.problems
    return out


def _xp(device: str):
    if device == "cuda":
        import cupy
        return cupy
    return np


def harness_error_record(capsule, handler, device, stride, exc) -> dict:
    """A record for a sweep that raised: not a verdict; the traceback says where."""
    import traceback
    from conformance import evidence
    from conformance.fingerprint import fingerprint, harness_digest
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    empty = Tally().to_json()
    none = {"formula": "", "to_mpmath": 0, "bound_audit": {"checked": 0, "worst_ratio": 0.0},
            "spot_check": {"checked": 0, "disagreed": 0},
            "judge_cross_check": {"checked": 0, "disagreed": 0}, "model": None, "problems": []}
    return {"format": EXHAUSTIVE_FORMAT, "version": RECORD_VERSION,
            "capsule": evidence.capsule_record(capsule),
            "mode": "exhaustive" if stride == 1 else "sampled", "stride": stride,
            "device": device, "status": "harness-error",
            "message": f"{type(exc).__name__}: {exc}"[:500], "traceback": tail,
            "patterns": {"checked": 0}, "chunks": 0, "shards": 0, "forward": empty,
            "vjp": None, "reference": {"forward": none, "vjp": None}, "seconds": 0.0,
            "fingerprint": fingerprint(capsule, handler),
            "harness": harness_digest(), "environment": evidence.environment(device),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
