"""Replay files of 16-bit kernels' failures: `torchlean-conformance lowp --replay FILE` calls the
kernel again on the recorded inputs (bit for bit, in its kernel process) and judges the recorded
element as the sweep or audit did: exit 1 while it still fails for the recorded reason, 0 once it
does not. A file holds the plugin, the kernel's name, op, format and declared bound, the inputs'
bit patterns and shapes, the element, the reason and what was expected and returned: a unary
sweep's one input (its VJP's at a unit cotangent for `vjp-` reasons), a binary sweep's pair (an
op of the plugin's own names its contract, which `--op-contracts` must give again: the judge
imports a contract only on the user's word, never a file's), a binary VJP's (a, b, g) and which
gradient, an accumulating audit's case after shrinking (shrink.py), or, for its VJP's `vjp-`
reasons, the case and cotangent (the last input) cut to what the element reads where that still
fails (accumulate_vjp.restrict), the element as [gradient, index...]. An element the run's peer
contract would explain (conformance/lowp/conventions.py: the contract chosen by the file's plugin
spec and op, as the run chose it) passes."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from conformance.formats import LOWP_FORMAT
from conformance.jsonfile import read_tagged, write_atomic
from conformance.lowp.formats import ACCUMULATIONS, FORMATS
from conformance.lowp.trust import file_name

LOWP_REPLAY_FORMAT = LOWP_FORMAT + "-replay"
FIX = "rerun `torchlean-conformance lowp` to make it again"


def _inputs_json(bits: list[np.ndarray]) -> list[dict]:
    """Each input's patterns: all 2^16 in order, one pattern repeated, or listed."""
    out = []
    for b in bits:
        flat = b.reshape(-1)
        if flat.size == 1 << 16 and np.array_equal(flat, np.arange(1 << 16)):
            out.append({"shape": list(b.shape), "all_patterns": True})
        elif flat.size > 1 and np.all(flat == flat[0]):
            out.append({"shape": list(b.shape), "fill": f"{int(flat[0]):04x}"})
        else:
            out.append({"shape": list(b.shape), "bits": [f"{int(v):04x}" for v in flat]})
    return out


def _inputs_bits(inputs: list) -> list[np.ndarray]:
    out = []
    for x in inputs:
        n = int(np.prod(x["shape"], dtype=np.int64))
        if x.get("all_patterns") is True:
            flat = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        elif "fill" in x:
            flat = np.full(n, int(x["fill"], 16), dtype=np.uint16)
        else:
            flat = np.array([int(v, 16) for v in x["bits"]], dtype=np.uint16)
        if flat.size != n or not all(0 <= int(v) < 1 << 16 for v in flat[:1]):
            raise ValueError(f"an input of shape {x['shape']} with {flat.size} patterns")
        out.append(flat.reshape(x["shape"]))
    return out


def replay_doc(rec: dict, kind: str, bits: list[np.ndarray], element, example,
               bound: float | None = None) -> dict:
    """A replay document for one counterexample of the record `rec`. `bound`: the side's
    declared bound (a VJP's), default the record's."""
    return {"format": LOWP_REPLAY_FORMAT, "plugin": rec.get("plugin"), "kernel": rec["kernel"],
           "op": rec["op"], "storage": rec["storage"],
           "bound_ulps": rec["bound_ulps"] if bound is None else bound,
           "kind": kind, "accumulation": rec.get("accumulation"), "inputs": _inputs_json(bits),
           "element": [int(i) for i in element],
           "reason": example["reason"], "expected": example.get("expected"),
           "got": example.get("got"), "harness": rec.get("harness"),
           **({"contract": rec["reference"]["contract"]} if isinstance(rec.get("reference"), dict)
              else {})}


def write_replay(out_dir: Path, doc: dict) -> Path:
    """Write a replay document under `out_dir`/replays; its path."""
    path = Path(out_dir) / "replays" / file_name(doc["kernel"], doc["reason"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, doc)
    return path


class ReplayFileError(ValueError):
    """A replay file that cannot be replayed: not one, or one whose fields are malformed."""


def read_replay(path) -> tuple[dict, list[np.ndarray]]:
    """The replay document and its inputs' bit patterns, or ReplayFileError saying what is
    wrong (UnusableFileError for a file that is not a replay at all)."""
    doc = read_tagged(path, "format", LOWP_REPLAY_FORMAT, "a 16-bit replay file", FIX)
    try:
        if doc["storage"] not in FORMATS or not isinstance(doc["plugin"], str) or \
                doc["kind"] not in ("unary", "vjp", "binary", "binary-vjp", "accumulating",
                                    "accumulating-vjp") or \
                doc.get("accumulation", "float32") not in (None, *ACCUMULATIONS):
            raise ValueError("its plugin, format, kind or accumulation")
        bits = _inputs_bits(doc["inputs"])
        element = tuple(int(i) for i in doc["element"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ReplayFileError(f"{path}: a 16-bit replay file with malformed fields ({exc}); "
                              f"{FIX}") from None
    doc["element"] = element
    return doc, bits


def replay_contract(doc: dict):
    """The peer contract the run judged the element under: chosen by the file's plugin spec and
    op, as the run chose it (conformance/peers/contracts.lowp_contract_for); None for none."""
    from conformance.lowp.kernel import ACCUMULATING
    from conformance.peers.contracts import lowp_contract_for
    return None if doc["op"] in ACCUMULATING else lowp_contract_for(doc["plugin"], doc["op"])


def _explained(doc: dict, fmt, xs: list, got, at: tuple, out_bits) -> bool:
    """Whether the peer's contract explains the element (conformance/lowp/conventions.py)."""
    from conformance.lowp.conventions import Differences
    contract = replay_contract(doc)
    if contract is None:
        return False
    vjp = doc["kind"] == "vjp"
    failing = np.zeros(got.shape, dtype=bool)
    failing[at] = True
    explained = Differences(contract).explain(
        "vjp" if vjp else "forward", fmt, xs[:1] if vjp else xs, got, failing,
        out=None if out_bits is None else fmt.decode(out_bits),
        cotangent=xs[1] if vjp else None)
    return bool(explained[at])


def judge_replay(doc: dict, bits: list[np.ndarray], got_bits: np.ndarray,
                 out_bits: np.ndarray | None = None, op_contract=None) -> tuple[str, float]:
    """(the reason the element fails for now, '' where it passes or the peer's contract explains
    it; its correctly rounded reference), judged as the run did. `out_bits`: a VJP's kernel's
    forward output on the same input (the peer's rules read it); `op_contract`: an own op's
    (contracts.LoadedContract)."""
    fmt = FORMATS[doc["storage"]]
    xs = [fmt.decode(b) for b in bits]
    at = tuple(doc["element"])
    if doc["kind"] == "accumulating-vjp":      # got_bits: one array per gradient
        from conformance.lowp.accumulate_vjp import judge_vjp
        verdicts = judge_vjp(doc["op"], fmt, xs[:-1], xs[-1], [fmt.decode(b) for b in got_bits])
        reason, ref, _ = verdicts[at[0]]
        return ("vjp-" if reason[at[1:]] else "") + str(reason[at[1:]]), float(ref[at[1:]])
    got = fmt.decode(got_bits)
    if doc["kind"] == "accumulating":
        from conformance.lowp import accumulate
        reason, ref, _ = accumulate.judge(doc["op"], fmt, xs, got,
                                          doc.get("accumulation") or "float32")
        return str(reason[at]), float(ref[at])
    if doc["kind"] in ("binary", "binary-vjp"):
        from conformance.lowp.binary import classify_against, judge_codes
        from conformance.lowp.sweep import REASONS
        over = "not-correctly-rounded" if doc["bound_ulps"] <= 0.5 else "exceeds-bound"
        if doc["kind"] == "binary":
            code, _, ref = judge_codes(doc["op"], fmt, doc["bound_ulps"], xs[0], xs[1], got,
                                       op_contract=op_contract)
            reason = (REASONS + (over,))[int(code[at])]
            if reason and _explained(doc, fmt, xs, got, at, None):
                reason = ""
            return reason, float(ref[at])
        from conformance.lowp.binary_vjp import vjp_reference
        refs, exacts = vjp_reference(doc["op"], fmt, *xs)
        ref = np.stack(np.broadcast_arrays(*refs))
        code, _ = classify_against(fmt, doc["bound_ulps"], got, ref,
                                   np.stack(np.broadcast_arrays(*exacts)))
        reason = (REASONS + (over,))[int(code[at])]
        return ("vjp-" + reason if reason else ""), float(ref[at])
    from conformance.lowp.derivatives import DERIVATIVES
    from conformance.lowp.refs import reference
    from conformance.lowp.sweep import unary_reasons
    table = DERIVATIVES if doc["kind"] == "vjp" else None
    ref, exact, _ = reference(fmt, doc["op"], xs[0], table)
    reason, _ = unary_reasons(fmt, xs[0], got, ref, exact, doc["bound_ulps"])
    if reason[at] and _explained(doc, fmt, xs, got, at, out_bits):
        reason[at] = ""
    return ("vjp-" if doc["kind"] == "vjp" and reason[at] else "") + str(reason[at]), float(ref[at])


def _hex_bits(text: str) -> list[np.ndarray]:
    return [np.array([int(t, 16)], dtype=np.uint16) for t in text.split(", ")]


def make_replays(rec: dict, kernel, out_dir: Path, op_contract=None) -> list[str]:
    """A replay file for each counterexample of a record (an accumulating case shrunk first,
    through the kernel: `kernel` is the record's, in its kernel process); their paths relative to
    `out_dir`. The counterexamples' private `_inputs` (an audit's case) are removed. `op_contract`:
    an own op's (contracts.LoadedContract)."""
    from conformance.lowp.kernel import ACCUMULATING, BINARY
    paths = []
    for ex in rec.get("counterexamples") or []:
        xs = ex.pop("_inputs", None)
        if rec["op"] in ACCUMULATING and ex["reason"].startswith("vjp-"):
            if xs is None:
                continue
            bits, at = _vjp_case(kernel, rec, xs, ex)
            kind = "accumulating-vjp"
        elif rec["op"] in ACCUMULATING:
            if xs is None:
                continue
            from conformance.lowp.shrink import shrink
            small, at, tries = shrink(kernel, xs, tuple(ex["element"]), ex["reason"])
            ex["shrunk_shapes"], ex["shrink_tries"] = [list(x.shape) for x in small], tries
            bits, kind = [kernel.fmt.encode(x) for x in small], "accumulating"
        elif rec["op"] in BINARY and ex["reason"].startswith("vjp-"):
            output = ("ga", "gb").index(ex["output"])
            bits, kind, at = _hex_bits(ex["input"]), "binary-vjp", (output, 0)
        elif rec["op"] in BINARY or op_contract is not None:
            bits, kind, at = _hex_bits(ex["input"]), "binary", (0,)
        elif ex["reason"].startswith("vjp-"):
            one = kernel.fmt.encode(np.array([1.0]))
            bits, kind, at = _hex_bits(ex["input"]) + [one], "vjp", (0,)
        else:
            bits, kind, at = _hex_bits(ex["input"]), "unary", (0,)
        vjp_part = kind in ("vjp", "binary-vjp")
        bound = (rec.get("vjp") or {}).get("bound_ulps") if vjp_part else None
        doc = replay_doc(rec, kind, bits, at, ex, bound)
        if kind != "accumulating" and not _reproduces(kernel, doc, bits, op_contract):
            # alone it passes (a kernel whose answer depends on the call's size): the whole row
            # of the sweep, as it was called, with the element at its place there
            bits, at = _row_of(ex, at) if kind == "binary-vjp" else _in_context(bits)
            doc = replay_doc(rec, kind, bits, at, ex, bound)
            doc["alone_passes"] = True
        doc["reproduced"] = _reproduces(kernel, doc, bits, op_contract)
        path = write_replay(out_dir, doc)
        ex["replay"] = str(path.relative_to(out_dir))
        paths.append(ex["replay"])
    return paths


def _vjp_case(kernel, rec: dict, xs: list[np.ndarray], ex: dict) -> tuple[list, tuple]:
    """(the bits of a VJP counterexample's case, cotangent last; its element as [gradient,
    index...]): what the element reads (accumulate_vjp.restrict) where that alone still fails
    for its reason, else the whole case."""
    from conformance.lowp.accumulate_vjp import GRADIENTS, restrict
    fmt, op = kernel.fmt, rec["op"]
    which = GRADIENTS[op].index(ex["gradient"])
    small = restrict(op, xs[:-1], xs[-1], which, tuple(ex["element"]))
    ex["restricted_shapes"] = None
    if small is not None:
        cut, g, at = small
        bits = [fmt.encode(x) for x in cut + [g]]
        doc = {"kind": "accumulating-vjp", "op": op, "storage": fmt.name,
               "element": (which,) + tuple(at), "reason": ex["reason"]}
        from conformance.lowp.sweep import LowpKernelError
        try:
            still = judge_replay(doc, bits, _call(kernel, doc, bits))[0] == ex["reason"]
        except LowpKernelError:      # it fails otherwise on the smaller case: keep the whole
            still = False
        if still:
            ex["restricted_shapes"] = [list(x.shape) for x in cut + [g]]
            return bits, (which,) + tuple(at)
    return [fmt.encode(x) for x in xs], (which,) + tuple(ex["element"])


def _call(kernel, doc: dict, bits: list[np.ndarray]):
    """The kernel's result bits: an array (a binary VJP's (ga, gb) stacked), or an accumulating
    VJP's tuple of gradients (their form checked: LowpKernelError otherwise)."""
    if doc["kind"] == "accumulating-vjp":
        from conformance.lowp.audit_vjp import call_vjp_twice
        return call_vjp_twice(kernel, bits, [b.shape for b in bits[:-1]], "the replay's case")[0]
    part = "vjp" if doc["kind"] in ("vjp", "binary-vjp") else "forward"
    return np.asarray(kernel.call_bits(*bits, part=part))


def _forward(kernel, doc: dict, bits: list[np.ndarray]) -> np.ndarray | None:
    """A VJP's kernel's forward output on the same input, where a peer's rules may read it."""
    if doc["kind"] != "vjp" or replay_contract(doc) is None:
        return None
    return np.asarray(kernel.call_bits(bits[0]))


def _element_bits(got, doc: dict) -> int:
    at = tuple(doc["element"])
    return int(got[at[0]][at[1:]]) if doc["kind"] == "accumulating-vjp" else int(got[at])


def _reproduces(kernel, doc: dict, bits: list[np.ndarray], op_contract=None) -> bool:
    """Whether the kernel fails on the document's inputs as recorded; sets its `got` and
    `expected` to this call's (a shrunk case has its own)."""
    got = _call(kernel, doc, bits)
    reason, ref = judge_replay(doc, bits, got, _forward(kernel, doc, bits), op_contract)
    doc["got"], doc["expected"] = f"0x{_element_bits(got, doc):04x}", kernel.fmt.hex(ref)
    return reason == doc["reason"]


def _in_context(bits: list[np.ndarray]) -> tuple[list[np.ndarray], tuple]:
    """A sweep's call around one element: all 2^16 patterns in the first input (the unary
    sweep's call, or the binary sweep's row of b), the others filled with their pattern."""
    x = int(bits[0][0])
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    return [every] + [np.full(1 << 16, int(b[0]), dtype=np.uint16) for b in bits[1:]], (x,)


def _row_of(ex: dict, at: tuple) -> tuple[list[np.ndarray], tuple]:
    """A binary VJP sweep's call around one element: its row's three inputs as the sweep made
    them (kernel.triple_inputs), the element at its place there."""
    from conformance.lowp.kernel import triple_inputs
    row = ex["row"]
    bits = triple_inputs(np.array(row["mults"], np.uint16)[:, None],
                         np.array(row["adds"], np.uint16)[:, None])
    return list(bits), (at[0], int(ex["element"]))


def main_replay(path, timeout: float | None, contract_specs=()) -> tuple[int, str]:
    """(exit status, the line to print): 1 while the recorded element still fails for its
    reason, 0 once it does not. `contract_specs`: --op-contracts, which an own op's replay
    needs (ReplayFileError without its op's)."""
    from conformance.lowp.contracts import load_contracts
    from conformance.lowp.remote import open_kernels
    doc, bits = read_replay(path)
    contracts = load_contracts(list(contract_specs or ()), doc["plugin"])
    op_contract = contracts.get(doc["op"])
    if doc.get("contract") and op_contract is None:
        raise ReplayFileError(f"{path}: op `{doc['op']}` is the plugin's own, judged against "
                              f"the contract `{doc['contract']}`: pass it again, --op-contracts "
                              f"{doc['contract']} (the judge imports a contract only on your "
                              "word)")
    kp, kernels = open_kernels(doc["plugin"], timeout=timeout, own_ops=set(contracts))
    try:
        kernel = next((k for k in kernels if k.name == doc["kernel"]), None)
        if kernel is None:
            raise ReplayFileError(f"{path}: --plugin `{doc['plugin']}` no longer declares "
                                  f"`{doc['kernel']}`; {FIX}")
        got = _call(kernel, doc, bits)
        out = _forward(kernel, doc, bits)
    finally:
        kp.close()
    fmt = FORMATS[doc["storage"]]
    if doc["kind"] != "accumulating-vjp":
        want_shape = np.broadcast_shapes(*(b.shape for b in bits)) \
            if doc["kind"] != "accumulating" else None
        if doc["kind"] == "binary-vjp":      # (ga, gb)
            want_shape = (2,) + want_shape
        if got.dtype != np.uint16 or (want_shape is not None and got.shape != want_shape):
            return 1, f"still fails: {doc['kernel']} returned {got.dtype}{list(got.shape)}"
    if out is not None and (out.dtype != np.uint16 or out.shape != got.shape):
        return 1, (f"still fails: {doc['kernel']}'s forward, which the peer's rules read, "
                   f"returned {out.dtype}{list(out.shape)}")
    now, ref = judge_replay(doc, bits, got, out, op_contract)
    at = doc["element"]
    bits_at = _element_bits(got, doc)
    value = f"0x{bits_at:04x} ({float(fmt.decode(np.array([bits_at]))[0]):.6g})"
    where = f"{doc['kernel']} ({doc['storage']} {doc['op']}) element {list(at)}"
    if now == doc["reason"]:
        return 1, (f"still fails: {where}: got {value}, expected {fmt.hex(ref)} ({ref:.6g}): "
                   f"{doc['reason']}")
    if now:
        return 1, f"fails for another reason now: {where}: got {value}: {now} (was {doc['reason']})"
    return 0, f"passes now: {where}: got {value} (the run recorded {doc['got']}: {doc['reason']})"
