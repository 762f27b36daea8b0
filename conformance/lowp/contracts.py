"""The contract of a plugin's own binary 16-bit op (`lowp --op-contracts MODULE:ATTR`): the op as
the plugin defines it, in a module of its own that the judge imports on the user's word, never
the kernels' module (only their kernel process imports that; docs/PLUGINS.md's contract modules,
for 16-bit ops). A BinaryContract gives

- `reference64(a, b)`: the op's value in float64 at the operands' values (16-bit values, exact in
  float64), vectorised: arrays in, an array of their shape out (NumPy's; CuPy's under `--device
  cuda`, which operators and NumPy's ufuncs take as well). Its NaNs, infinities and zeros' signs
  are the op's wherever the operands are not finite, the value is not finite, or it is zero;
- `reference_mp(a, b)`: the exact value at finite operands (mpmath numbers in and out, at MP_PREC
  bits), asked only where reference64's value needs deciding or certifying;
- `float64_error`, the plugin's guarantee of reference64 at finite operands and a finite value:
  "exact"; "one-rounding": the exact value rounded once to float64 by one of IEEE's +, -, *, /
  or sqrt of the operands (a / b): rounding that again to the format is the correct rounding,
  because 53 >= 2p + 2 (Figueroa, "When is double rounding innocuous?", 1995; in the format's
  subnormal range too: a quotient, product or square root of 16-bit values that is not a midpoint
  of the format lies at least 2^-(2p+3) relative from every one, far beyond float64's 2^-53);
  or a number k: within k 2^-53 |exact| (sqrt(a^2 + b^2): the sum's rounding and sqrt's give
  about 1.5; declare 2). Under k the judge asks reference_mp wherever the float64 value lies
  within its error of a midpoint between two values of the format, or of the boundary to
  infinity: there the rounding is decided in mpmath (refs._round_mp), elsewhere by rounding the
  float64 value. mpmath evaluates at MP_PREC bits, and again at 4 times as many (up to
  MAX_PREC) while its value lies within 2^(8 - precision) of an ulp of a midpoint: a value that
  close at every precision is taken for the midpoint itself (Ziv's strategy; an exact value can
  exceed a midpoint by far less than 2^-120 relative: gelu of bfloat16's least subnormal does).

Certification, in the judge, before any kernel of the op is swept in a format (`certify`): the
special pairs (SPECIALS x SPECIALS), RANDOM_PAIRS pairs drawn from the run seed, and up to
MIDPOINT_PAIRS of SCREENED more drawn pairs whose float64 value lies on a midpoint or within its
declared error of one (where a false declaration misrounds). At each pair of finite operands
where reference_mp answers, reference64 must be within its declared error of reference_mp's value
and the sweep's rounding of it must be reference_mp's correctly rounded value; otherwise the
contract is refused (ReferenceRefusedError, saying where). The certification is a sample: a
sweep that passes against such a reference is verified against the plugin's contract, not
against ours, and the records and trust say so (trust.py).
"""
from __future__ import annotations

import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import mpmath
import numpy as np

from conformance.lowp.formats import SPECIALS, Format, host
from conformance.lowp.kernel import ACCUMULATING, BINARY
from conformance.lowp.refs import FUNCTIONS, MAX_PREC, MP_PREC, _round_mp, near_midpoint, near_tie

U64 = 2.0 ** -53                # float64's unit roundoff
SLACK = 1 + 2.0 ** -50          # the few roundings of the judge's own error arithmetic
RANDOM_PAIRS = 20000
SCREENED = 1 << 20
MIDPOINT_PAIRS = 2000
ROUNDED_ONCE = ("exact", "one-rounding")


@dataclass(frozen=True)
class BinaryContract:
    """A plugin's own binary op (this module's docstring says what each field promises)."""
    op: str                             # its name, as its kernels declare it: not one of ours
    reference64: Callable               # (a, b) float64 arrays -> float64 array
    reference_mp: Callable              # (a, b) mpmath numbers -> the exact value
    float64_error: str | float          # "exact", "one-rounding", or k: k 2^-53 relative
    description: str = ""               # the op in words, for the records


@dataclass(frozen=True)
class LoadedContract:
    """A contract as the judge loaded it: the spec it came from and its source files' digest."""
    contract: BinaryContract
    spec: str
    source: str

    def summary(self) -> dict:
        """What a record says of the reference it was judged against."""
        c = self.contract
        return {"by": "contract", "contract": self.spec, "contract_source": self.source,
                "description": c.description, "float64_error": c.float64_error}


class LowpContractError(ValueError):
    """`--op-contracts` that cannot be loaded: not importable, not BinaryContracts, an op of ours,
    an op twice, a bad float64_error, or a module that imports the kernels' module."""


class ReferenceRefusedError(ValueError):
    """A contract's reference64 that is not what it declares (or fails to answer) at a pair of
    the certification or the sweep: its kernels are not judged against it."""


def load_contracts(specs: list[str], plugin: str | None) -> dict[str, LoadedContract]:
    """op -> its contract, for each `module:attr` of `specs` (a BinaryContract, a list of them, or
    a function returning either), imported here, in the judge, on the user's word. LowpContractError
    for anything else, or where importing it imported the plugin's kernel module `plugin`."""
    from conformance.isolation.plugin_files import files_digest, plugin_files
    out: dict[str, LoadedContract] = {}
    kernels_module = (plugin or "").partition(":")[0]
    for spec in specs:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise LowpContractError(f"--op-contracts `{spec}` is not of the form module:attr, "
                                    "e.g. fixtures.plugins.low_precision_div_contract:CONTRACTS")
        if kernels_module and module_name == kernels_module:
            raise LowpContractError(f"--op-contracts `{spec}` names the kernels' own module; the "
                                    "judge never imports it: put the contract in a module of "
                                    "its own")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        kernels_here = kernels_module in sys.modules     # a test's process may hold it already
        try:
            obj = getattr(importlib.import_module(module_name), attr)
            obj = obj() if callable(obj) and not isinstance(obj, BinaryContract) else obj
        except Exception as exc:
            raise LowpContractError(f"--op-contracts `{spec}`: {type(exc).__name__}: {exc}; "
                                    "fix the contract module") from None
        if kernels_module and not kernels_here and kernels_module in sys.modules:
            raise LowpContractError(f"--op-contracts `{spec}` imported the kernels' module "
                                    f"`{kernels_module}` into the judge; a contract may not "
                                    "import its kernels")
        for c in obj if isinstance(obj, (list, tuple)) else [obj]:
            _check(c, spec)
            if c.op in out:
                raise LowpContractError(f"--op-contracts: op `{c.op}` has two contracts "
                                        f"({out[c.op].spec} and {spec}); give one")
            out[c.op] = LoadedContract(c, spec, files_digest(plugin_files(spec)))
    return out


def _check(c, spec: str) -> None:
    ours = sorted(FUNCTIONS) + list(ACCUMULATING) + list(BINARY)
    if not isinstance(c, BinaryContract):
        raise LowpContractError(f"--op-contracts `{spec}` holds {type(c).__name__}, expected "
                                "conformance.lowp.contracts.BinaryContract (or a list of them)")
    if not (isinstance(c.op, str) and c.op.isidentifier()) or c.op in ours:
        what = "one of ours" if c.op in ours else "not a name"
        raise LowpContractError(f"--op-contracts `{spec}`: op {c.op!r} is {what}; name the "
                                "plugin's own op by an identifier that is not one of "
                                f"{', '.join(ours)}")
    k = c.float64_error
    if not (k in ROUNDED_ONCE or (isinstance(k, (int, float)) and not isinstance(k, bool)
                                  and math.isfinite(k) and 0 <= k <= 2.0 ** 20)):
        raise LowpContractError(f"--op-contracts `{spec}`: op `{c.op}` declares float64_error "
                                f"{k!r}; expected 'exact', 'one-rounding' or a number of 2^-53 "
                                "units from 0 to 2^20")
    if not (callable(c.reference64) and callable(c.reference_mp)):
        raise LowpContractError(f"--op-contracts `{spec}`: op `{c.op}` needs callables "
                                "reference64(a, b) and reference_mp(a, b)")


def _float64(c: BinaryContract, a, b, xp):
    """reference64's values, or ReferenceRefusedError where it raises or returns another shape."""
    try:
        with np.errstate(all="ignore"):
            y = c.reference64(a, b)
        y = xp.asarray(y, dtype=xp.float64)
    except Exception as exc:
        raise ReferenceRefusedError(f"op `{c.op}`: reference64 raised {type(exc).__name__}: "
                                    f"{exc}; fix the contract") from None
    if y.shape != a.shape:
        raise ReferenceRefusedError(f"op `{c.op}`: reference64 returned shape {list(y.shape)} "
                                    f"for operands of shape {list(a.shape)}; it must be "
                                    "elementwise")
    return y


def _exact(c: BinaryContract, fmt: Format, a: float, b: float):
    """(reference_mp's value at a finite pair, correctly rounded to the format; the value) at a
    precision where the rounding is sure (this module's docstring), or None where it raises or
    answers no finite number."""
    prec = MP_PREC
    while True:
        with mpmath.workprec(prec):
            try:
                x = c.reference_mp(mpmath.mpf(a), mpmath.mpf(b))
            except Exception:
                return None
            if not (isinstance(x, mpmath.mpf) and mpmath.isfinite(x)):
                return None
            if prec >= MAX_PREC or not near_tie(fmt, x, prec):
                return _round_mp(fmt, x), x
        prec *= 4


def reference(loaded: LoadedContract, fmt: Format, a, b, xp=np):
    """(the contract's value correctly rounded to the format, its float64 value, how many pairs
    mpmath decided) at float64 operands `a`, `b` (NumPy or CuPy)."""
    c = loaded.contract
    y = _float64(c, a, b, xp)
    rounded = fmt.round(y, xp)
    if c.float64_error in ROUNDED_ONCE:
        return rounded, y, 0
    err = c.float64_error * U64 * SLACK * xp.abs(y)
    close = near_midpoint(fmt, y, err, xp) & xp.isfinite(a) & xp.isfinite(b)
    at = host(xp.flatnonzero(close))
    if at.size:
        ah, bh = host(a.reshape(-1)[xp.asarray(at)]), host(b.reshape(-1)[xp.asarray(at)])
        values = np.empty(at.size)
        for j, (x1, x2) in enumerate(zip(ah.tolist(), bh.tolist())):
            exact = _exact(c, fmt, x1, x2)
            if exact is None:
                raise ReferenceRefusedError(
                    f"op `{c.op}`: reference_mp gave no finite number at a = {x1!r}, b = {x2!r}, "
                    f"where reference64's value {float(host(y.reshape(-1)[at[j]])):.17g} must "
                    "be decided; fix the contract")
            values[j] = exact[0]
        flat = rounded.reshape(-1)
        flat[xp.asarray(at)] = xp.asarray(values)
        rounded = flat.reshape(y.shape)
    return rounded, y, int(at.size)


def certification_pairs(loaded: LoadedContract, fmt: Format, seed: int):
    """(a bits, b bits, counts by kind) of the certification: the special pairs, RANDOM_PAIRS
    drawn from `seed`, and up to MIDPOINT_PAIRS of SCREENED further ones whose float64 value is
    on or near a midpoint of the format."""
    rng = np.random.default_rng([seed, 0x0b1a])
    sp = np.array(SPECIALS, dtype=np.uint16)
    a = [np.repeat(sp, sp.size), rng.integers(0, 1 << 16, RANDOM_PAIRS, dtype=np.uint32)]
    b = [np.tile(sp, sp.size), rng.integers(0, 1 << 16, RANDOM_PAIRS, dtype=np.uint32)]
    sa, sb = (rng.integers(0, 1 << 16, SCREENED, dtype=np.uint32).astype(np.uint16)
              for _ in range(2))
    y = _float64(loaded.contract, fmt.decode(sa), fmt.decode(sb), np)
    k = loaded.contract.float64_error
    err = (U64 if k in ROUNDED_ONCE else k * U64 * SLACK) * np.abs(y)
    near = np.flatnonzero(near_midpoint(fmt, y, err))[:MIDPOINT_PAIRS]
    a.append(sa[near])
    b.append(sb[near])
    counts = {"special_pairs": int(sp.size ** 2), "random_pairs": RANDOM_PAIRS,
              "midpoint_pairs": int(near.size), "screened_pairs": SCREENED}
    return (np.concatenate(a).astype(np.uint16), np.concatenate(b).astype(np.uint16), counts)


def _within(c: BinaryContract, y: float, x) -> bool:
    """Whether reference64's value y is within its declared error of the exact value x."""
    k = c.float64_error
    if k == "exact":
        return mpmath.mpf(y) == x
    if k == "one-rounding":
        return y == float(x)
    with mpmath.workprec(MP_PREC):
        return abs(mpmath.mpf(y) - x) <= mpmath.mpf(k) * mpmath.mpf(U64) * abs(x)


_CERTIFIED: dict = {}     # (contract, format, seed) -> its certification or refusal, this run


def certify(loaded: LoadedContract, fmt: Format, seed: int) -> dict:
    """The certification of a contract in a format (this module's docstring): what it covered,
    or ReferenceRefusedError naming the first pair where it disagrees and how many do. Made once
    per run for all the op's kernels in the format."""
    key = (loaded, fmt.name, seed)
    if key not in _CERTIFIED:
        try:
            _CERTIFIED[key] = _certify(loaded, fmt, seed)
        except ReferenceRefusedError as exc:
            _CERTIFIED[key] = exc
    if isinstance(_CERTIFIED[key], ReferenceRefusedError):
        raise _CERTIFIED[key]
    return dict(_CERTIFIED[key])


def _certify(loaded: LoadedContract, fmt: Format, seed: int) -> dict:
    c, t0 = loaded.contract, time.perf_counter()
    a_bits, b_bits, counts = certification_pairs(loaded, fmt, seed)
    a, b = fmt.decode(a_bits), fmt.decode(b_bits)
    rounded, y, _ = reference(loaded, fmt, a, b)
    wrong, first, compared = 0, None, 0
    for i in np.flatnonzero(np.isfinite(a) & np.isfinite(b)).tolist():
        exact = _exact(c, fmt, float(a[i]), float(b[i]))
        if exact is None:
            if not np.isfinite(y[i]):      # undefined there (a / 0): IEEE's value is the op's
                continue
            why = "reference_mp gives no finite number where reference64's value is finite"
        else:
            compared += 1
            want, x = exact
            if not np.isfinite(y[i]):
                why = None if want == rounded[i] else "reference64 is not finite there"
            elif not _within(c, float(y[i]), x):
                why = f"reference64 is not within its declared float64 error ({c.float64_error})"
            else:
                why = None if want == rounded[i] else \
                    "the float64 value does not round as the exact one"    # 0 == -0: IEEE's sign
            if why:
                why += f" (exact {mpmath.nstr(x, 20)}, correctly rounded {fmt.hex(want)})"
        if why:
            wrong += 1
            first = first or (int(a_bits[i]), int(b_bits[i]), float(a[i]), float(b[i]),
                              float(y[i]), why)
    if first:
        pa, pb, va, vb, vy, why = first
        raise ReferenceRefusedError(
            f"op `{c.op}` ({loaded.spec}) is refused in {fmt.name}: at a = 0x{pa:04x} ({va!r}), "
            f"b = 0x{pb:04x} ({vb!r}) {why}: reference64 gives {vy!r}; wrong at {wrong} of the "
            f"{a.size} certification pairs (run seed {seed}); fix reference64 or reference_mp, "
            "or declare the float64_error it has")
    return {"format": fmt.name, "seed": seed, "pairs": int(a.size), **counts,
            "compared_with_mpmath": compared, "seconds": round(time.perf_counter() - t0, 3)}
