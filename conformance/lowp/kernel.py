"""What a plugin declares for a 16-bit unary kernel (imported in the kernel process too: it holds
no reference, bound rule or verdict, only the declaration)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.lowp.formats import Format


ACCUMULATING = ("sum", "softmax", "matmul", "linear", "log_softmax", "layer_norm",
                "attention")    # conformance/lowp/accumulate.py
BINARY = ("add", "sub", "mul", "max", "min")    # conformance/lowp/binary.py: all 2^32 pairs


@dataclass(frozen=True)
class LowpKernel:
    """A kernel in one 16-bit format: `fn` takes and returns arrays of the format's NumPy dtype
    (numpy.float16, or ml_dtypes.bfloat16). `op` is a unary function of conformance/lowp/refs.py
    (fn(x), elementwise; `bound_ulps` is its declared bound in ulps of the format at the exact
    value, 0.5: correctly rounded), or an accumulating op: `sum` (fn(x) of shape (m, n) -> (m,),
    over the last axis), `softmax`, `log_softmax` or `layer_norm` (fn(x), (m, n) -> (m, n), over
    the last axis; layer_norm without affine parameters, eps 1e-5), `matmul` (fn(a, b),
    (m, k) @ (k, n)), `linear` (fn(x, w, b) = x w^T + b: (m, k), (n, k), (n,) -> (m, n)) or
    `attention` (fn(q, k, v) = softmax(q k^T / sqrt(d)) v: (L, d), (S, d), (S, dv) -> (L, dv)),
    declared to compute in float32 and round once to the format at the output (`accumulation`
    "float32"), or to round every intermediate to the format `accumulation` names: "bfloat16",
    "float16" (its own or the other 16-bit format) or "float64", judged by
    accumulate_rounded.py's models; the judge refuses other names at load. A unary kernel may
    bring its VJP (`vjp`), swept at a unit cotangent over all inputs against f'(x) rounded to the
    format. An accumulating kernel of float32 accumulation may bring its VJP too: vjp(*inputs, g)
    -> a tuple of one gradient per input (docs/OPS.md's rules; a bare array where there is one
    input), arrays of the format, under the forward's policy (float32 inside, one rounding per
    output element), audited on cases and cotangents the judge draws (audit_vjp.py). A binary
    elementwise op of BINARY (fn(a, b), same shapes) is swept over all 2^32 pairs of patterns
    (binary.py), `bound_ulps` as a unary op's; it may bring its VJP too, vjp(a, b, g) -> (ga, gb)
    (binary_vjp.py). An op of the plugin's own (not ours: `op` names it) is binary when the judge
    is given its contract (contracts.BinaryContract, `lowp --op-contracts`), never from this
    declaration."""
    name: str
    op: str
    fmt: Format
    fn: Callable
    bound_ulps: float = 0.5
    accumulation: str = "float32"
    vjp: Callable | None = None     # vjp(x, g) -> g f'(x); a binary op's vjp(a, b, g) -> (ga, gb);
    #                                 accumulating: vjp(*inputs, g) -> tuple; arrays of the format
    vjp_bound_ulps: float | None = None     # a unary or binary VJP's bound (default: bound_ulps)

    def call(self, *bits, part: str = "forward"):
        """The kernel (or its VJP) on arrays of the format made from bit patterns: what it
        returned. InputMutated when it wrote into an input (it gets copies: the caller's are
        safe, but a kernel that writes into its inputs breaks its callers)."""
        fn = self.fn if part == "forward" else self.vjp
        given = [self.fmt.to_numpy(b.copy()) for b in bits]
        out = fn(*given)
        for i, (g, b) in enumerate(zip(given, bits)):
            if not np.array_equal(g.view(np.uint16), np.asarray(b, dtype=np.uint16)):
                raise InputMutated(f"{self.name}{' VJP' if part == 'vjp' else ''} wrote into "
                                   f"its input {i}")
        return out

    def call_bits(self, *bits, part: str = "forward"):
        """The kernel (or its VJP) on bit patterns, in this process: its result's bit patterns
        (a tuple of them where a VJP returns one gradient per input; a binary op's VJP: (ga, gb)
        stacked, shape (2,) + the inputs')."""
        out = self.call(*bits, part=part)
        if part == "vjp" and isinstance(out, (tuple, list)):
            grads = tuple(self.fmt.bits_of(o) for o in out)
            return np.stack(grads) if self.op in BINARY else grads
        return self.fmt.bits_of(out)

    def call_pairs(self, rows: np.ndarray):
        """A binary kernel on the pairs of `rows` (pair_inputs), called twice, in this process:
        (the first call's result bits, how many elements the second call's differ at, the first
        DIFFERENCES of their indices)."""
        a, b = pair_inputs(rows)
        return _twice(lambda: np.asarray(self.call_bits(a, b)))

    def call_triples(self, mults: np.ndarray, adds: np.ndarray):
        """A binary kernel's VJP on the inputs (a, b, g) of `mults` and `adds` (triple_inputs),
        called twice, in this process: as call_pairs, of the (2, n) bits of (ga, gb)."""
        a, b, g = triple_inputs(mults, adds)
        return _twice(lambda: np.asarray(self.call_bits(a, b, g, part="vjp")))


def _twice(call):
    """call() twice: (the first result, how many elements the second differs at, the first
    DIFFERENCES of their flat indices; all of them where its shape differs)."""
    first = call()
    again = call()
    if again.shape != first.shape:
        return first, first.size, np.arange(min(first.size, DIFFERENCES), dtype=np.int64)
    if np.array_equal(again, first):    # the usual answer, without a 2^27-element index scan
        return first, 0, np.zeros(0, dtype=np.int64)
    differ = np.flatnonzero(again != first)
    return first, int(differ.size), differ[:DIFFERENCES].astype(np.int64)


DIFFERENCES = 4096    # indices of a second call's differing results sent back, at most


class InputMutated(Exception):
    """A kernel wrote into an array it was given (the audit's reason `mutated-input`)."""


def pair_inputs(rows, xp=np) -> tuple:
    """The bit patterns (a, b) of a binary sweep's shard: element i pairs a = i mod 2^16 with
    b = rows[i // 2^16], so a shard of r rows holds r 2^16 pairs and all 2^16 rows hold every
    pair. Made where the kernel runs, so that only results travel between the processes, and
    again by the judge (`xp`: NumPy or CuPy). Broadcast into place: NumPy's tile and repeat
    took 0.6 s a 2^27-pair shard, this 0.07 s."""
    rows = xp.asarray(rows, dtype=xp.uint16)
    a = xp.empty((rows.size, 1 << 16), dtype=xp.uint16)
    b = xp.empty_like(a)
    a[...] = xp.arange(1 << 16, dtype=xp.uint32).astype(xp.uint16)
    b[...] = rows[:, None]
    return a.reshape(-1), b.reshape(-1)


def triple_inputs(mults, adds, xp=np) -> tuple:
    """The bit patterns (a, b, g) of a binary VJP sweep's shard (binary_vjp.py): row r of the
    shard, element x (0 .. 2^16 - 1) has input i = (mults[i, r] x + adds[i, r]) mod 2^16, so a
    multiplier 1 runs the input over every pattern, an odd one over a permutation of them, 0 holds
    it at the row's `adds`. Made where the kernel runs and again by the judge, from the same two
    (3, rows) arrays: only results travel."""
    # The product in uint32 (two patterns' product fits; no int promotion to overflow, in NumPy's
    # C loops or CuPy's), cut to 16 bits, then the offset added in uint16, whose wrap is the
    # modulo (uint64 and a mask took 7.4 s a 2^27-triple shard on this CPU)
    x = xp.arange(1 << 16, dtype=xp.uint32)
    m = xp.asarray(mults, dtype=xp.uint32)
    k = xp.asarray(adds, dtype=xp.uint16)
    out = []
    for i in range(3):
        t = (x[None, :] * m[i][:, None]).astype(xp.uint16)
        t += k[i][:, None]
        out.append(t.reshape(-1))
    return tuple(out)
