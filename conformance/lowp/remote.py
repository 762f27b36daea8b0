"""The judge's side of a 16-bit sweep of a plugin's kernels: they run in a kernel process
(conformance/isolation/lowp_side.py); this process holds the references and the verdicts and
never imports the plugin. Every answer is checked for form before it is judged."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from conformance.isolation.remote import KernelProcess, PluginLoadError, _check
from conformance.lowp.formats import (FORMATS, Format, UnknownAccumulationError,
                                      accumulation_format)
from conformance.lowp.kernel import ACCUMULATING, BINARY, DIFFERENCES
from conformance.lowp.refs import FUNCTIONS
from conformance.lowp.sweep import LowpKernelError

LOAD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RemoteLowpKernel:
    """A plugin's 16-bit kernel as its kernel process described it, called there."""
    process: KernelProcess
    name: str
    op: str
    fmt: Format
    bound_ulps: float
    timeout: float | None
    accumulation: str = "float32"
    has_vjp: bool = False
    vjp_bound_ulps: float = 0.5

    @property
    def vjp(self):   # sweep.py asks whether there is one; the call goes through call_bits
        return self.has_vjp or None

    # the rows of a shard of pairs posted ahead (prefetch_pairs) and not collected yet
    _posted: list = field(default_factory=list, compare=False)

    def _ask(self, message: dict, budget: int, during: str, posted: bool = False) -> dict:
        """The kernel process's answer to one call (`posted`: to the request prefetch_pairs sent
        ahead), checked for form; its raise, or a write into its inputs, is the kernel's verdict
        (LowpKernelError)."""
        from conformance.isolation.kernel_side import KernelRaised
        what = self._during(during)
        try:
            if not posted:
                self.process.post(message, what)
            reply = _check(self.process.collect(budget, timeout=self.timeout, what=what))
        except KernelRaised as exc:
            raise LowpKernelError(f"{self.name} raised {exc}") from None
        if isinstance(reply.get("mutated"), str):
            raise LowpKernelError(reply["mutated"], "mutated-input")
        return reply

    def call_bits(self, *bits: np.ndarray, part: str = "forward"):
        """The result's bits (a tuple of arrays where an accumulating kernel's VJP answered
        one per gradient: their form is the caller's to check, audit_vjp.call_vjp_twice)."""
        size = sum(b.nbytes for b in bits)
        reply = self._ask({"op": "lowp_call", "name": self.name, "inputs": list(bits),
                           "part": part}, 8 * size + (1 << 20), "audit")
        out = reply.get("bits")
        if part == "vjp" and self.op in ACCUMULATING and isinstance(out, list) and \
                all(isinstance(o, np.ndarray) for o in out):
            return tuple(out)
        return self._bits(reply)

    def _bits(self, reply: dict) -> np.ndarray:
        out = reply.get("bits")
        if not isinstance(out, np.ndarray):
            raise LowpKernelError(f"{self.name} returned {str(reply.get('returned'))[:200]}; "
                                  f"expected a {self.fmt.name} array")
        return out

    def call_pairs(self, rows: np.ndarray):
        """kernel.LowpKernel.call_pairs, in the kernel process (which makes the pairs): the
        bits (checked for form by binary.py) and where a second call differed, as it says.
        The answer to a prefetch_pairs of the same rows when one is outstanding."""
        posted = bool(self._posted)
        if posted and not np.array_equal(self._posted.pop(), rows):
            raise RuntimeError(f"{self.name}: a shard was prefetched and other rows asked for")
        return self._shard(self._pairs_request(rows), rows.size << 16, "pairs", posted)

    def prefetch_pairs(self, rows: np.ndarray) -> None:
        """Ask the kernel process for the shard of `rows` now; call_pairs(rows) collects it.
        binary.sweep_pairs judges one shard while the kernel process computes the next."""
        if self._posted:
            raise RuntimeError(f"{self.name}: a prefetched shard is still outstanding")
        self.process.post(self._pairs_request(rows), self._during("sweep"))
        self._posted.append(np.array(rows, copy=True))

    def drop_prefetch(self) -> None:
        """Read and drop the answer to an outstanding prefetch (a sweep that stopped early):
        the next request must not read it as its own."""
        if self._posted:
            rows = self._posted.pop()
            self.process.collect(_shard_budget(rows.size << 16), timeout=self.timeout,
                                 what=self._during("sweep"))

    def _pairs_request(self, rows: np.ndarray) -> dict:
        return {"op": "lowp_pairs", "name": self.name, "rows": rows}

    def _during(self, what: str) -> str:
        return f"during {self.name}'s {what}"

    def call_triples(self, mults: np.ndarray, adds: np.ndarray):
        """kernel.LowpKernel.call_triples, in the kernel process (which makes the triples): the
        (2, n) bits of (ga, gb) (checked for form by binary_vjp.py) and where a second call
        differed, as it says."""
        return self._shard({"op": "lowp_triples", "name": self.name, "mults": mults,
                            "adds": adds}, 2 * (mults.shape[1] << 16), "gradients")

    def _shard(self, message: dict, n: int, what: str, posted: bool = False):
        reply = self._ask(message, _shard_budget(n), "sweep", posted)
        where, differ = reply.get("differ_at"), reply.get("differ")
        if not (isinstance(where, np.ndarray) and where.dtype == np.int64 and where.ndim == 1
                and where.size <= DIFFERENCES and isinstance(differ, int)
                and where.size <= differ <= n and np.all((where >= 0) & (where < n))):
            raise LowpKernelError(f"{self.name}'s kernel process answered a shard of {n} {what} "
                                  f"without a well-formed repeat check ({str(differ)[:50]} "
                                  "differences)")
        return self._bits(reply), differ, where


def _shard_budget(n: int) -> int:
    """The most bytes a shard's answer of n 16-bit results may declare: their bits (two bytes
    each), the indices of the differences listed (DIFFERENCES int64s), and room for the rest."""
    return 2 * n + 8 * DIFFERENCES + (1 << 20)


def _described(entry, spec: str, own_ops=()) -> tuple:
    """(name, op, format, bound, accumulation) of one description, or PluginLoadError saying
    what is wrong. `own_ops`: the plugin's own binary ops whose contracts the judge loaded."""
    ops = sorted(FUNCTIONS) + list(ACCUMULATING) + list(BINARY) + sorted(own_ops)
    if isinstance(entry, dict) and isinstance(entry.get("op"), str) and entry["op"] not in ops:
        raise PluginLoadError(
            f"--plugin `{spec}` declared a 16-bit kernel of op `{entry['op'][:80]}`, which is "
            f"not one of ours ({', '.join(sorted(FUNCTIONS) + list(ACCUMULATING + BINARY))})"
            + (f" nor of the contracts given ({', '.join(sorted(own_ops))})" if own_ops else "")
            + ": for an op of your own, give its contract with `--op-contracts MODULE:ATTR` "
            "(a conformance.lowp.contracts.BinaryContract; docs/EXHAUSTIVE.md)")
    ok = isinstance(entry, dict) and isinstance(entry.get("name"), str) and \
        entry.get("op") in ops and entry.get("format") in FORMATS and \
        isinstance(entry.get("bound_ulps"), float) and math.isfinite(entry["bound_ulps"]) and \
        entry["bound_ulps"] >= 0.5
    if not ok:
        raise PluginLoadError(
            f"--plugin `{spec}` declared a 16-bit kernel the harness cannot judge "
            f"({str(entry)[:300]}): expected a name, an op of {', '.join(ops)}, a format of "
            f"{', '.join(sorted(FORMATS))} and a bound of at least 0.5 ulp")
    _check_accumulation(entry, spec)
    vjp_bound = entry.get("vjp_bound_ulps")
    judged = entry["op"] in FUNCTIONS or entry["op"] in BINARY or (
        entry["op"] in ACCUMULATING and entry["accumulation"] == "float32")
    if not isinstance(entry.get("has_vjp"), bool) or not isinstance(vjp_bound, float) or \
            not math.isfinite(vjp_bound) or vjp_bound < 0.5 or (entry["has_vjp"] and not judged):
        raise PluginLoadError(f"--plugin `{spec}` declared a VJP the harness cannot judge "
                              f"({str(entry)[:300]}): only a unary kernel's, one of "
                              f"{', '.join(BINARY)}'s (not yet an op of the plugin's own), with "
                              "a bound of at least 0.5 ulp, or an accumulating kernel's under "
                              "float32 accumulation (the VJPs' error models are float32's); drop "
                              "the VJP or declare accumulation='float32'")
    return (entry["name"], entry["op"], FORMATS[entry["format"]], entry["bound_ulps"],
            entry["accumulation"], entry["has_vjp"], vjp_bound)


class AccumulationDeclarationError(PluginLoadError):
    """A kernel declares an accumulation format the harness has no model for, or one for an op
    that accumulates nothing."""


def _check_accumulation(entry: dict, spec: str) -> None:
    """AccumulationDeclarationError unless the entry's accumulation is a modelled format, and
    float32 (the default) for an op that does not accumulate."""
    given = entry.get("accumulation")
    what = f"--plugin `{spec}`: kernel `{str(entry['name'])[:80]}` ({entry['op']})"
    try:
        accumulation_format(given)
    except UnknownAccumulationError as exc:
        raise AccumulationDeclarationError(f"{what}: {exc}") from None
    if given != "float32" and entry["op"] not in ACCUMULATING:
        raise AccumulationDeclarationError(
            f"{what} declares accumulation {given!r}, but only the accumulating ops "
            f"({', '.join(ACCUMULATING)}) are judged by their arithmetic format; leave a unary or "
            f"binary kernel's accumulation at float32 (its bound_ulps is its contract)")


def open_kernels(spec: str, timeout: float | None = None, own_ops=()
                 ) -> tuple[KernelProcess, list[RemoteLowpKernel]]:
    """A kernel process holding the plugin's 16-bit kernels, and their stand-ins here.
    `own_ops`: the ops of the contracts loaded (contracts.load_contracts), which its kernels may
    declare."""
    kp = KernelProcess("cpu", spec)
    try:
        reply = kp.request({"op": "lowp_load", "plugin": spec}, budget=0,
                           timeout=LOAD_TIMEOUT_S, what="while loading its 16-bit kernels")
        if isinstance(reply.get("plugin_error"), str):
            raise PluginLoadError(reply["plugin_error"][:4000])
        entries = reply.get("kernels")
        if not isinstance(entries, list):
            raise PluginLoadError(f"--plugin `{spec}`: its kernel process answered without a "
                                  "kernel list")
        kernels = []
        for e in entries:
            name, op, fmt, bound, accumulation, has_vjp, vjp_bound = _described(e, spec,
                                                                                 own_ops)
            kernels.append(RemoteLowpKernel(kp, name, op, fmt, bound, timeout, accumulation,
                                            has_vjp, vjp_bound))
        names = [k.name for k in kernels]
        if len(set(names)) != len(names):
            raise PluginLoadError(f"--plugin `{spec}` declares a kernel name twice: "
                                  f"{sorted(n for n in set(names) if names.count(n) > 1)}")
        return kp, kernels
    except BaseException:
        kp.close()
        raise
