"""softmax, log_softmax and hard-masked softmax (engine/csrc/cuda/softmax.cu), forward and VJP.

The plain capsules of softmax and log_softmax run a float32 forward (tl_softmax_f32.cuh: TwoSum
split of x - max, libdevice expf, fixed-order row sums of float64 additions; declared bounds
derived there) on rows of up to 8192 contiguous entries held in registers (float4 loads and
stores where n % 4 == 0 and the arrays are 16-byte aligned), and softmax.cu's float64
kernel beyond (longer rows, inner axes: within the fast bound too). Their accurate variants
(`native_cuda.<op>.accurate`) keep the float64 forward, rounded once. Every capsule, masked
softmax's included, shares the float64 VJP kernels: rows of up to 8192 contiguous entries held in
registers by a warp or a block (one read, one write); one block per row otherwise. The plain
log_softmax capsule's VJP register variants take exp(y) from float32 expf (the derived rule it is
judged by allows it; the VJP was bound by the float64 exp at n = 8192)."""
from __future__ import annotations

from engine.capsule import ACCURATE
from engine.providers.native_cuda.decl import F64_ONCE_ROWS, KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, axis_view, contiguous, kernel,
                                                 mask_bytes, new_array, row_grid)
from engine.tape_saves import saves
from engine.types import BackendOp as Op, DeclaredBound

_FILE = "softmax.cu"
_MASKED_FWD, _MASKED_BWD = "tl_masked_softmax_fwd", "tl_masked_softmax_bwd"
# Register-path variants (softmax.cu's header): (suffix, threads per row, largest n), smallest
# first; a row longer than the last one takes the general kernel. Rows of 257..1024 differ: the
# forward's warp per row (K = 32, warp shuffles only) measured faster on the H200 for
# log_softmax than a block per row (whose first-max search adds block barriers), the VJP's
# block per row (K = 4, 32 registers) ran at 98% of the copy ceiling where a warp (K = 32) ran
# at 60%.
_FWD_VARIANTS = (("_w2", 32, 64), ("_w8", 32, 256), ("_w32", 32, 1024), ("_b8", BLOCK, 2048),
                 ("_b32", BLOCK, 8192))
_VJP_VARIANTS = (("_w2", 32, 64), ("_w8", 32, 256), ("_b4", BLOCK, 1024), ("_b8", BLOCK, 2048),
                 ("_b32", BLOCK, 8192))


# The float32 forwards' variants (tl_softmax_f32.cuh). Rows of 257..1024: a warp per row (K = 32,
# 102-128 registers, shuffles only) measured faster on the H200 at 65536 x 1024 than a block per
# row (K = 4, 40 registers, 6 blocks per SM, barriers in each reduction): softmax 192 against
# 218 us, log_softmax 251 against 308 us (benchmarks/bench_rows_notes.md, run 5).
_F32_VARIANTS = (("_w2", 32, 64), ("_w8", 32, 256), ("_w32", 32, 1024), ("_b8", BLOCK, 2048),
                 ("_b16", BLOCK, 4096), ("_b32", BLOCK, 8192))
# Their float4 forms (one 16-byte load and store per four entries), for rows of n % 4 == 0 over
# 64 entries with 16-byte aligned arrays: the same arithmetic, a quarter of the memory
# instructions and no per-entry test of the row's end (full rows: none at all).
_F32_VEC_VARIANTS = (("_wv2", 32, 256), ("_wv8", 32, 1024), ("_bv2", BLOCK, 2048),
                     ("_bv4", BLOCK, 4096), ("_bv8", BLOCK, 8192))
_VEC_MIN = 65   # rows of up to 64 keep _w2 (a float4 per lane would leave half a warp idle)


class _RowKernels:
    """One op's general kernel and its register-path variants, picked by the row's shape; the
    variants' symbols are `prefix` + suffix (default: the general kernel's symbol). Every kernel
    takes `arrays` pointers, then (rows, n, inner) (the general one) or (rows, n) (a variant),
    then float32 parameters, one per letter "f" of `floats`: the prepared launch's signature."""

    def __init__(self, symbol: str, variants: tuple, prefix: str | None = None,
                 vec: tuple = (), arrays: int = 2, floats: str = "") -> None:
        prefix = symbol if prefix is None else prefix
        self.symbols = (symbol,) + tuple(prefix + v[0] for v in variants + vec)
        self.general = kernel(_FILE, symbol, "p" * arrays + "uuu" + floats)
        variant_signature = "p" * arrays + "uu" + floats
        self.fast = tuple((kernel(_FILE, prefix + suffix, variant_signature), threads, most)
                          for suffix, threads, most in variants)
        self.vec = tuple((kernel(_FILE, prefix + suffix, variant_signature), threads, most)
                         for suffix, threads, most in vec)

    def _variant(self, n: int, inner: int, aligned: bool = True):
        """(kernel, threads per row) of the register variant for rows of n, or None; `aligned`:
        every array of the launch starts on a 16-byte boundary (the float4 forms need it)."""
        if inner != 1:
            return None
        if aligned and n % 4 == 0 and n >= _VEC_MIN:
            for kern, threads, most in self.vec:
                if n <= most:
                    return kern, threads
        for kern, threads, most in self.fast:
            if n <= most:
                return kern, threads
        return None

    def pick(self, n: int, inner: int, aligned: bool = True) -> str:
        """The symbol a row of n entries (inner: the stride between them) launches."""
        chosen = self._variant(n, inner, aligned)
        return self.general.symbol if chosen is None else chosen[0].symbol

    def __call__(self, rows: int, n: int, inner: int, head: tuple, tail: tuple = ()) -> None:
        """Launch over `rows` rows of n: head = the arrays (None: a null pointer, no array),
        tail = the float arguments after the extents."""
        ptrs = tuple(0 if a is None else a.data.ptr for a in head)
        # every array starts on a 16-byte boundary (a view may start anywhere)
        chosen = self._variant(n, inner, bool(self.vec) and all(p % 16 == 0 for p in ptrs))
        if chosen is None:
            self.general.launch(row_grid(rows)[0], *ptrs, rows, n, inner, *tail)
            return
        kern, threads = chosen
        per_block = BLOCK // threads
        kern.launch(row_grid((rows + per_block - 1) // per_block)[0], *ptrs, rows, n, *tail)


_masked_fwd = _RowKernels(_MASKED_FWD, _FWD_VARIANTS, arrays=3, floats="f")   # (x, mask, out)
_masked_bwd = _RowKernels(_MASKED_BWD, _VJP_VARIANTS, arrays=4)   # (y, g, mask, gx)


def _rows(shape, axis: int) -> tuple[int, int, int]:
    """(rows, n, inner) of the [outer][n][inner] view around `axis`."""
    outer, n, inner = axis_view(shape, axis % len(shape))
    return outer * inner, n, inner


def masked_softmax_rows(x, mask, scale: float = 1.0):
    """Hard-masked softmax of scale * x along the last axis (mask: bool bytes of x's shape, or
    None: every key participates); composed attention calls this on its score matrix."""
    out = new_array(x.shape, x.size)
    rows, n, inner = _rows(x.shape, -1)
    if out.size:
        _masked_fwd(rows, n, inner, (x, mask, out), (float(scale),))
    return out


def _forward(kern: _RowKernels):
    def forward(a, axis=-1):
        out = new_array(a.shape, a.size)
        rows, n, inner = _rows(a.shape, axis)
        if out.size:
            kern(rows, n, inner, (a, out))
        return out

    return forward


def _vjp(kern: _RowKernels):
    @saves(output=True)
    def vjp(inputs, output, g, axis=-1):
        g = contiguous(g)
        gx = new_array(g.shape, g.size)
        rows, n, inner = _rows(g.shape, axis)
        if gx.size:
            kern(rows, n, inner, (contiguous(output), g, gx))
        return (gx,)

    return vjp


def _masked_forward(a, mask, axis=-1):
    out = new_array(a.shape, a.size)
    rows, n, inner = _rows(a.shape, axis)
    if out.size:
        _masked_fwd(rows, n, inner, (a, mask_bytes(mask), out), (1.0,))
    return out


@saves(output=True)
def _masked_vjp(inputs, output, g, mask, axis=-1):
    g = contiguous(g)
    gx = new_array(g.shape, g.size)
    rows, n, inner = _rows(g.shape, axis)
    if gx.size:
        _masked_bwd(rows, n, inner, (contiguous(output), g, mask_bytes(mask), gx))
    return (gx,)


_ROW_NOTE = ("rows of up to 8192 contiguous entries (the last axis): held in registers by a warp "
             "(n <= 1024) or a block (n <= 8192), one read and one write, exp once per element; "
             "longer rows and inner axes: one block per row, three passes",)
_F32_NOTE = ("forward: rows of up to 8192 contiguous entries (the last axis) held in registers by "
             "a warp (n <= 1024) or a block, one read and one write (16-byte loads and stores "
             "where n % 4 == 0 and the arrays are aligned), float32 arithmetic but for "
             "the row sum (each term added in float64), its reciprocal or log1p; sums in a "
             "fixed order (per thread over its entries in order, then a fixed shuffle tree and "
             "the warps in order): bitwise repeatable run to run; longer rows and inner axes: "
             "the accurate variant's float64 kernel; VJP: the accurate variant's float64 "
             "kernels, rounded once (log_softmax's register variants: exp(y) by float32 expf)",)

# Derived in tl_softmax_f32.cuh's header (u = 2^-24, libdevice expf within 2 ulp = 4u): both hold
# for every row length (the row sum's error does not grow with n) and on the float64 fallback.
F32_SOFTMAX = DeclaredBound(
    10.0, "float32: x - max split exactly by TwoSum, exp(d) = expf(d_h)(1 + d_l) within "
          "4u + 2^-37 (libdevice expf: 2 ulp), the row sum S >= 1 (terms added in float64, "
          "their (1 + d_l) corrections in float32) within 4u + 2^-32, 1/S in float64 split in "
          "two floats and one rounding at the write: under 8.003u relative before it; with "
          "that rounding and the reference's own, under 9.6 ulp of the rounded reference, for "
          "any row length (subnormal results: under 7 ulp)")
F32_LOG_SOFTMAX = DeclaredBound(
    6.0, "float32: y = d - log1p(T), T the sum without the first max's 1: T = S - 1 from the "
         "sum S of every term (the ties' 1 exact) where T >= 2^-12, else the terms exp(d + 64) "
         "summed again without the ties (normal down to d = -151: no subnormal terms); either "
         "way within 4u + 2^-32, summed in "
         "float64, log1p in float64: the error of L is at most 4.003u L <= 4.003u |y| (no "
         "cancellation: d <= 0 <= L); the write is a float-float difference rounded once: "
         "under 5.6 ulp of the rounded reference, for any row length (subnormal results: "
         "under 4.5 ulp)")

# The same derivations under --use_fast_math, where expf is __expf: 2 + floor(1.173 |x|) ulp, at
# most 106 ulp = 212u relative where its result is normal (capsules.FAST_MATH_BOUNDS; below that
# it flushes, as the fast-math policy allows). Each exp's 4u above becomes 212u.
F32_SOFTMAX_FAST_MATH = DeclaredBound(
    426.0, "--use_fast_math: F32_SOFTMAX's derivation with __expf for expf: each term within "
           "212u relative (2 + floor(1.173 |x|) <= 106 ulp where the result is normal), the row "
           "sum S within 212u + 2^-32, 1/S and the product under 424.003u before the write; with "
           "that rounding and the reference's own, under 425.6 ulp of the rounded reference")
F32_LOG_SOFTMAX_FAST_MATH = DeclaredBound(
    214.0, "--use_fast_math: F32_LOG_SOFTMAX's derivation with __expf for expf: T within 212u + "
           "2^-32 relative, so L = log1p(T) (float64) within 212.003u L <= 212.003u |y|; the "
           "write a float-float difference rounded once: under 213.6 ulp of the rounded "
           "reference")


def _row_decl(op: Op, fwd: str, bwd: str, summary: str) -> KernelDecl:
    """The accurate variant: the float64 forward and VJP, rounded once (F64_ONCE_ROWS)."""
    f, b = _RowKernels(fwd, _FWD_VARIANTS), _RowKernels(bwd, _VJP_VARIANTS, arrays=3)
    return KernelDecl(op, _FILE, f.symbols, b.symbols, _forward(f), _vjp(b), f64_rows=True,
                      bound=F64_ONCE_ROWS, summary=summary, notes=_ROW_NOTE, variant=ACCURATE)


FAST_FORWARD: dict[Op, _RowKernels] = {}   # the plain capsules' forwards, for their selection


def _f32_decl(op: Op, fwd: str, prefix: str, bwd: str, bound: DeclaredBound,
              fast_math_bound: DeclaredBound, summary: str,
              bwd_prefix: str | None = None) -> KernelDecl:
    """The plain capsule: the float32 register forward (the float64 one past it); the VJP's
    register variants `bwd_prefix` + suffix (default: the accurate variant's float64 ones)."""
    f = _RowKernels(fwd, _F32_VARIANTS, prefix, _F32_VEC_VARIANTS)
    b = _RowKernels(bwd, _VJP_VARIANTS, bwd_prefix, arrays=3)
    FAST_FORWARD[op] = f
    return KernelDecl(op, _FILE, f.symbols, b.symbols, _forward(f), _vjp(b), bound=bound,
                      fast_math_bound=fast_math_bound, summary=summary, notes=_F32_NOTE)


DECLS = (
    _f32_decl(Op.softmax, "tl_softmax_fwd", "tl_softmax_f32", "tl_softmax_bwd", F32_SOFTMAX,
              F32_SOFTMAX_FAST_MATH, "fast float32 forward, within 10 ulp (a warp or block per row: exact max, "
              "TwoSum-split exp arguments, compensated fixed-order sum, one rounding at the "
              "write); the accurate variant native_cuda.softmax.accurate evaluates in float64 "
              "within 1 ulp"),
    _f32_decl(Op.log_softmax, "tl_log_softmax_fwd", "tl_log_softmax_f32", "tl_log_softmax_bwd",
              F32_LOG_SOFTMAX, F32_LOG_SOFTMAX_FAST_MATH,
              "fast float32 forward, within 6 ulp (a warp or block per row: x - max - "
              "log1p(rest), the rest summed compensated (scaled where it is tiny), log1p in "
              "float64); VJP g - exp(y) sum g with exp(y) by float32 expf (the derived rule's "
              "E_REL), the rest in float64; the accurate variant "
              "native_cuda.log_softmax.accurate evaluates both in float64 within 1 ulp",
              bwd_prefix="tl_log_softmax_bwd_f32"),
    _row_decl(Op.softmax, "tl_softmax_fwd", "tl_softmax_bwd",
              "accurate variant: a warp or block per row: max, sum of exp(x - max) and the "
              "quotients in float64, rounded once, within 1 ulp (the plain native_cuda.softmax "
              "is the fast float32 one)"),
    _row_decl(Op.log_softmax, "tl_log_softmax_fwd", "tl_log_softmax_bwd",
              "accurate variant: a warp or block per row: x - max - log1p(rest) in float64, "
              "rounded once, within 1 ulp (the plain native_cuda.log_softmax is the fast "
              "float32 one)"),
    KernelDecl(Op.hard_masked_softmax, _FILE, _masked_fwd.symbols, _masked_bwd.symbols,
               _masked_forward, _masked_vjp, f64_rows=True, bound=F64_ONCE_ROWS,
               summary="a warp or block per row over the participants only (blocked: exactly 0, "
                       "a row with none: zeros), float64, rounded once", notes=_ROW_NOTE),
)
