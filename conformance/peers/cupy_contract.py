"""CuPy's contract for the ops `conformance.peers.cupy_peer` audits: its semantics (CuPy's page of
each function, which defers to NumPy's or SciPy's), the conventions where CuPy (14.x) keeps its
own rule instead of TorchLean's (docs/OPS.md), and what it documents of its accuracy.

CuPy states its ufuncs' semantics by NumPy's ("see also numpy.maximum"), and its own page adds
NaN handling where it differs ("If NaN appears, it returns the NaN"). It states no accuracy of any
function; where its source shows the float32 kernel calling a CUDA math function, the CUDA C++
Programming Guide's bound for that function is the documented one (accuracy.cuda_function), as
for PyTorch: expf 2 ulp, logf 1, sinf, cosf, tanhf 2; x+y, x*y, and, under NVRTC's defaults
(-prec-div=true, -prec-sqrt=true; CuPy passes no --use_fast_math to its ufuncs), x/y and sqrtf
IEEE round-to-nearest, 0 ulp; selections and copies exact. Everything else (expit, logaddexp,
softmax, log_softmax, sum, mean, matmul, scatter_add) is a formula or a library call with no
stated accuracy: undocumented.

Its conventions come from its source, none from a page, so each is listed as undocumented:
- its kernels are compiled with -ftz=true (cupy/cuda/compiler.py appends it after the caller's
  options; the one doc line that says so is cupy.nextafter's note): subnormal operands are read as
  zero and subnormal results flushed. That is a numerical policy, stated in the entries' policy
  (conformance/peers/cupy_peer.py: cupy_policy) and here as a PolicyConvention, counted from the
  records' observations; the value rules below follow from it where an operand is read as zero
  but the value the kernel returns is not flushed (clip's selection; scale's alpha read as zero);
- maximum and minimum are CUDA's fmaxf / fminf after a NaN test, which fix no sign for a tie of
  zeros: +0 and -0 are both CuPy's value there (relu, as maximum(a, 0), too);
- log_softmax shifts a row by 0 where its max is not finite (SciPy's formula), so a row holding
  +inf is -inf at its other entries, not NaN.
Each rule is CuPy's kernel in float32 NumPy; the judge counts an element as a difference only
where the kernel returned that value exactly (conformance/peers/classify.py).
"""
from __future__ import annotations

import functools

from conformance.peers import rules as R
from conformance.peers.accuracy import UNDOCUMENTED_ACCURACY, DocumentedAccuracy, cuda_function
from conformance.peers.contract import Clause, Convention, PeerContract, PolicyConvention

DOCS = "https://docs.cupy.dev/en/stable/reference/generated/"
REPO = "cupy/cupy: "
FTZ_SOURCE = (REPO + "cupy/cuda/compiler.py (options += ('-ftz=true',) for every kernel it "
              "compiles); said on a page only in cupy.nextafter's note; reported as "
              "cupy/cupy#8382, #9576")

FTZ = PolicyConvention(
    Clause("ftz-subnormals", "every kernel CuPy compiles gets -ftz=true: a subnormal operand is "
           "read as a zero of its sign and a subnormal result is flushed to one (the entries' "
           "policy says subnormal=flush-to-zero, under which the judge admits both)",
           FTZ_SOURCE, documented=False),
    "subnormals", "flush-to-zero", ("subnormals_flushed", "inputs_flushed"))
ZERO_TIE = Clause(
    "zero-tie-either-sign", "maximum and minimum of two zeros of different sign (a subnormal "
    "read as zero included) may return either zero: the float32 kernel is CUDA's fmaxf / fminf "
    "after a NaN test, and neither CUDA nor IEEE 754-2008's maxNum fixes the sign of a zero tie "
    "(NumPy's page says where(x1 >= x2, x1, x2), the first operand, as TorchLean does)",
    REPO + "cupy/_math/misc.py (_float_maximum, _float_minimum)", documented=False)
RELU_TIE = Clause(
    "zero-tie-either-sign", "relu as maximum(a, 0): at a = -0 (or a negative subnormal, read as "
    "-0) a tie of zeros, and either zero is CuPy's value (TorchLean: +0)",
    REPO + "cupy/_math/misc.py (_float_maximum)", documented=False)
CLIP_FTZ = Clause(
    "clip-compares-flushed", "clip's kernel compares with subnormals read as zero and returns the "
    "operand it selects unflushed: clip(-1e-40, 0, 1) is -1e-40 (TorchLean: +0)",
    REPO + "cupy/_core/_routines_math.pyx (_clip), with -ftz=true", documented=False)
SCALAR_DAZ = Clause(
    "subnormal-scalar-read-as-zero", "a subnormal scalar (scale's alpha) is read as zero, as "
    "every operand of a -ftz=true kernel", FTZ_SOURCE, documented=False)
LOG_SOFTMAX_SHIFT = Clause(
    "shift-zero-at-nonfinite-max", "log_softmax shifts a row by 0 where its max is not finite "
    "(SciPy's formula): a row holding +inf gives -inf at its other entries and NaN at the +inf "
    "ones (TorchLean: NaN throughout)",
    REPO + "cupyx/scipy/special/_logsoftmax.py (x_max[~isfinite(x_max)] = 0)", documented=False)


def _exact(page: str) -> DocumentedAccuracy:
    """A selection or copy of input values: the value itself, 0 ulp."""
    return DocumentedAccuracy(0.0, "exact", DOCS + page)


def _ieee(function: str, calls: str) -> DocumentedAccuracy:
    """IEEE round-to-nearest arithmetic (NVRTC's defaults -prec-div=true, -prec-sqrt=true)."""
    return cuda_function(function, 0.0, REPO + calls)


# op -> what CuPy documents of its float32 forward's accuracy (module docstring)
ACCURACY = {
    "exp": cuda_function("expf", 2.0, REPO + "cupy/_math/explog.py (exp: 'out0 = exp(in0)', "
                                             "expf for float32)"),
    "log": cuda_function("logf", 1.0, REPO + "cupy/_math/explog.py (log)"),
    "safe_log": cuda_function("logf", 1.0, REPO + "cupy/_math/explog.py (log), after an "
                                                  "exact maximum"),
    "sin": cuda_function("sinf", 2.0, REPO + "cupy/_math/trigonometric.py (sin)"),
    "cos": cuda_function("cosf", 2.0, REPO + "cupy/_math/trigonometric.py (cos)"),
    "tanh": cuda_function("tanhf", 2.0, REPO + "cupy/_math/hyperbolic.py (tanh)"),
    "sqrt": _ieee("sqrtf", "cupy/_core/_routines_math.pyx (_sqrt: 'out0 = sqrt(in0)')"),
    "inv": _ieee("1/x (x/y)", "cupy/_math/arithmetic.py (reciprocal: 'out0 = 1 / in0')"),
    "add": _ieee("x+y", "cupy/_core/_routines_math.pyx (create_arithmetic: add)"),
    "sub": _ieee("x-y", "cupy/_core/_routines_math.pyx (create_arithmetic: subtract)"),
    "mul": _ieee("x*y", "cupy/_core/_routines_math.pyx (create_arithmetic: multiply)"),
    "scale": _ieee("x*y", "cupy/_core/_routines_math.pyx (create_arithmetic: multiply)"),
    "abs": _exact("cupy.absolute.html"), "relu": _exact("cupy.maximum.html"),
    "max": _exact("cupy.maximum.html"), "min": _exact("cupy.minimum.html"),
    "clamp": _exact("cupy.clip.html"), "reshape": _exact("cupy.reshape.html"),
    "permute": _exact("cupy.transpose.html"), "broadcast": _exact("cupy.broadcast_to.html"),
    "concat": _exact("cupy.concatenate.html"), "slice": _exact("cupy.ndarray.html"),
    "gather": _exact("cupy.take.html"),
}

# op -> CuPy's page of the function the entry calls (its semantics)
PAGES = {
    "add": "cupy.add.html", "sub": "cupy.subtract.html", "mul": "cupy.multiply.html",
    "scale": "cupy.multiply.html", "max": "cupy.maximum.html", "min": "cupy.minimum.html",
    "abs": "cupy.absolute.html", "sqrt": "cupy.sqrt.html", "relu": "cupy.maximum.html",
    "clamp": "cupy.clip.html", "sigmoid": "cupyx.scipy.special.expit.html",
    "tanh": "cupy.tanh.html", "softplus": "cupy.logaddexp.html", "exp": "cupy.exp.html",
    "log": "cupy.log.html", "sin": "cupy.sin.html", "cos": "cupy.cos.html",
    "inv": "cupy.reciprocal.html", "safe_log": "cupy.log.html",
    "softmax": "cupyx.scipy.special.softmax.html",
    "log_softmax": "cupyx.scipy.special.log_softmax.html", "reduce_sum": "cupy.sum.html",
    "reduce_mean": "cupy.mean.html", "mse_loss": "cupy.mean.html", "matmul": "cupy.matmul.html",
    "reshape": "cupy.reshape.html", "permute": "cupy.transpose.html",
    "broadcast": "cupy.broadcast_to.html", "concat": "cupy.concatenate.html",
    "slice": "cupy.ndarray.html", "gather": "cupy.take.html",
    "scatter_add": "cupyx.scatter_add.html",
}


def _contract(op: str, *conventions: Convention) -> PeerContract:
    from conformance.peers.cupy_peer import NVRTC_OPS     # imports without CuPy
    ftz = (FTZ,) if op in {o.label for o in NVRTC_OPS} else ()
    return PeerContract("CuPy", op, DOCS + PAGES[op], conventions,
                        ACCURACY.get(op, UNDOCUMENTED_ACCURACY), (), ftz)


@functools.lru_cache(maxsize=1)
def contracts() -> dict[str, PeerContract]:
    """cupy_peer.<op> -> CuPy's contract, for every op conformance/peers/cupy_peer.py audits
    (CUPY_OPS): its page, its value conventions (none for most), the policy convention of the
    ops its own NVRTC kernels compute (-ftz=true), its documented accuracy."""
    from conformance.peers.cupy_peer import CUPY_OPS, PREFIX
    table = [
        _contract("max", Convention(ZERO_TIE, "value", R.zero_tie_either_sign())),
        _contract("min", Convention(ZERO_TIE, "value", R.zero_tie_either_sign())),
        _contract("relu", Convention(RELU_TIE, "value", R.zero_tie_either_sign(0.0))),
        _contract("clamp", Convention(CLIP_FTZ, "value", R.clip_compares_flushed)),
        _contract("scale", Convention(SCALAR_DAZ, "value", R.scale_daz_alpha)),
        _contract("log_softmax",
                  Convention(LOG_SOFTMAX_SHIFT, "value", R.log_softmax_shift_zero_at_nonfinite_max)),
    ]
    named = {c.op for c in table}
    table += [_contract(op.label) for op in CUPY_OPS if op.label not in named]
    return {f"{PREFIX}.{c.op}": c for c in table}


def with_conventions() -> dict[str, PeerContract]:
    """The contracts that state a value convention of their own."""
    return {name: c for name, c in contracts().items() if c.conventions}
