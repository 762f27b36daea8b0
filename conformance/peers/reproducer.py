"""A standalone reproducer of a peer's finding, for its maintainers: `torchlean-conformance
reproduce FILE [--failure N] [--against peer|torchlean] [--out PATH]` writes a short Python script
that imports only the peer (torch, jax, or cupy with its cupyx) and NumPy, feeds the recorded
shrunk counterexample of a replay file bit for bit (inputs, parameters such as axes, eps, masks,
indices and scale, and for a VJP finding the cotangent), calls the same expression the peer plugin
audited (conformance/peers/expressions.py: one text for both), and prints the peer's value beside
the correctly rounded one, the exact value and the test.

The test is the element's own, as the harness derived it: the same bits as the correctly rounded
value where the contract is bitwise, the correctly rounded value where it asks that, else
|got - exact| <= bound, the bound the harness's error model (conformance/error_models.py) gave
that element, written into the script with where it came from; a NaN or an infinity must be met.
A whole-case finding (the peer raised, or returned another shape) is tested as such.

Which finding, and what it is. A replay file lists up to five failing elements; the script
reproduces the first that is a defect against the peer's own contract (--failure N picks
another). Its class is decided as `classify-peers` decides it (conformance/peers/rejudge.py,
accuracy.py), on the replay's shrunk case: a defect (the peer breaks its documented semantics or
a documented bound, or keeps no correct digit), a convention (the peer's own rule, value for
value), or accuracy the peer does not document.

What a maintainer gets for a finding that is not a defect. Exiting 1 there would claim a bug the
peer never promised not to have: a layer_norm 15 ulp from the correctly rounded value breaks
nothing PyTorch documents (it states no accuracy for it), and relu's NaN gradient is PyTorch's
documented rule. So the script still feeds the case and prints the measurement, says what the
finding is and why, and exits 0 either way: a record of the finding, not a bug report, and never
a failing CI job over a promise the peer did not make. `--against torchlean` writes one that exits
1 while the element misses TorchLean's bound, for a user of TorchLean's contract; its docstring
says so. Where no peer contract is known (a plugin spec of a peer module that names no contract),
the same rules run with an undocumented accuracy: a NaN, an infinity, a wrong selection or a value
with no correct digit is a defect, anything else is not. CuPy's findings (`cupy_peer.*`, forward
only) are classified under conformance/peers/cupy_contract.py, with its kernels' -ftz=true: the
convention rules read a subnormal operand as zero where CuPy's contract states that policy.

What it cannot reproduce it refuses (exit 2, nothing written, the reason and what to do): an
element left unwritten (poison-in-output: only the harness's poisoned buffers show it), a
repeatability, mutation or order finding (the replay command checks those), a VJP finding of a
peer without autodiff (CuPy), an op its peer's expression table lacks, or a file another plugin
wrote (a capsule of the peer's prefix from another plugin, or fixtures/plugins/cupy_ufuncs.py's
`cupy.<op>` sweeps: their functions are not the table's).
"""
from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import numpy as np

from conformance import error_models as E
from conformance.peers import accuracy as A
from conformance.peers.expressions import CUPY, PEERS, ExpressionError, expression
from conformance.peers.reproducer_script import Spec, f32_bits, script
from conformance.replay import ReplayError, decode_case, read_replay

AGAINST = ("peer", "torchlean")
WHOLE_CASE = ("raised", "wrong-type", "shape-mismatch")      # tested by the script as such
_NOT_A_SCRIPT = {
    "poison-in-output": "an element the kernel never wrote shows only in the harness's "
                        "poisoned output buffers, which a script of the peer's own API does not "
                        "have",
    "input-mutated": "a mutated input is the harness's check of the buffers it handed over",
    "not-repeatable": "repeatability is the harness's repeated runs of the case",
    "identity": "the VJP identity is checked over the harness's random cotangents",
    "order-mismatch": "the order claim is checked against the harness's order programs",
    "unchecked-order-claim": "the order claim is checked against the harness's order programs",
    "param-not-rounded": "the rounding of a parameter is checked against the harness's "
                         "reference twice evaluated",
}
# capsule prefixes of another plugin than the peer module whose table they name: a file of theirs
# is refused as a file of another plugin is. `cupy.<op>` is fixtures/plugins/cupy_ufuncs.py's (the
# exhaustive sweeps, getattr(cupy, name)(a)); conformance.peers.cupy_peer names its `cupy_peer.`
OTHER_PLUGINS = {"cupy": CUPY}
_HEX32 = re.compile(r"0x[0-9a-f]{8}")
_GRAD = re.compile(r"grad\[(\d{1,3})\]")


class ReproducerError(Exception):
    """The replay file, or a finding in it, is not one a reproducer can be written for (a usage
    error: the message says what was given, what was expected and what to do)."""


def _fix(path) -> str:
    return f"replay file {path}"


def _number(value, field: str, path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ReproducerError(f"{_fix(path)}: `{field}` holds {value!r}, expected a number (or "
                              f"\"nan\", \"inf\", \"-inf\"); write the file again with `run`")
    try:
        return float(value)
    except ValueError:
        raise ReproducerError(f"{_fix(path)}: `{field}` holds {value!r}, expected a number; "
                              "write the file again with `run`") from None


def _base(reason: str) -> tuple[str, bool]:
    return (reason[4:], True) if reason.startswith("vjp-") else (reason, False)


def _checked(failure, i: int, path, case) -> dict:
    """The failure's fields a script is written from, checked (module docstring of replay.py: a
    replay file is data)."""
    where = f"{_fix(path)}: `failures[{i}]`"
    if not isinstance(failure, dict):
        raise ReproducerError(f"{where} holds {type(failure).__name__}, expected an object")
    reason, output = failure.get("reason"), failure.get("output")
    base, _ = _base(reason) if isinstance(reason, str) else ("", False)
    known = set(E.REASONS) - {E.OK} | set(WHOLE_CASE) | set(_NOT_A_SCRIPT)
    if base not in known:
        raise ReproducerError(f"{where}.reason holds {reason!r}, expected a failure reason of "
                              f"the harness ({', '.join(sorted(known))}, or vjp- one)")
    grad = _GRAD.fullmatch(output) if isinstance(output, str) else None
    whole_vjp = output == "grad" and base in WHOLE_CASE     # the VJP as a whole
    if output != "value" and not whole_vjp and (grad is None
                                                or int(grad[1]) >= len(case.inputs)):
        raise ReproducerError(f"{where}.output holds {output!r}, expected \"value\" or "
                              f"\"grad[i]\" with i below the case's {len(case.inputs)} inputs")
    if base in _NOT_A_SCRIPT:
        raise ReproducerError(f"{where} is {reason}: no script reproduces it ("
                              f"{_NOT_A_SCRIPT[base]}); replay it with the file's `command`, "
                              "or pass --failure N for another of its findings")
    out = {"reason": reason, "base": base, "vjp": output != "value",
           "output": int(grad[1]) if grad is not None else 0}
    if base in WHOLE_CASE:
        out["got"] = " ".join(str(failure.get("got", "")).split())[:200]
        return out
    element = failure.get("element")
    shape = (case.inputs[out["output"]].shape if out["vjp"] else
             None if case.cotangent is None else case.cotangent.shape)
    if not isinstance(element, list) or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in element) or (
            shape is not None and (len(element) != len(shape)
                                   or any(k >= n for k, n in zip(element, shape)))):
        raise ReproducerError(f"{where}.element holds {element!r}, expected the index of an "
                              f"element of the output" + (f" (shape {list(shape)})" if shape
                                                          is not None else ""))
    for field in ("expected", "got"):
        if not (isinstance(failure.get(field), str) and _HEX32.fullmatch(failure[field])):
            raise ReproducerError(f"{where}.{field} holds {failure.get(field)!r}, expected "
                                  "float32 bits as 0x followed by 8 hex digits")
    bound = failure.get("bound")
    out.update(element=tuple(element), expected=failure["expected"], got=failure["got"],
               exact=_number(failure.get("exact"), f"failures[{i}].exact", path),
               bound=None if bound is None else _number(bound, f"failures[{i}].bound", path),
               ulps=failure.get("ulps"))
    return out


def _words(x: float) -> str:
    return f"{x:.3g}"


def finding_class(data: dict, raw: dict, failure: dict) -> tuple[str, str]:
    """(class, why) of one failure of the replay file against its peer's contract (the module
    docstring): `raw` as the file holds it, `failure` as _checked read it."""
    from conformance.peers.contracts import contract_for
    from conformance.peers.rejudge import replay_class
    table = PEERS[data["capsule"].split(".", 1)[0]]
    contract = contract_for(data.get("plugin"), data["capsule"])
    op, reason, base, vjp = data["case"]["op"], failure["reason"], failure["base"], failure["vjp"]
    if base in WHOLE_CASE:
        return A.DEFECT, (f"{'its VJP ' if vjp else ''}{reason} on a case the op is defined "
                          f"on: {failure.get('got') or 'no message'} (a whole-case failure is "
                          "a defect wherever it occurs)")
    output = "grad" if vjp else "value"
    got = float(np.array(int(failure["got"], 16), np.uint32).view(np.float32))
    exact, ulps = failure["exact"], _float(failure.get("ulps"))
    daz = _daz(table, data, contract)
    if contract is not None:
        cls, clause = replay_class(contract, raw, data, daz)
        documented = A.bound_for(contract, output)
        about = f"{table.peer}'s page ({contract.semantics})"
    else:
        defect, _ = A.classes(np.array([base], dtype=object), np.array([got]),
                              np.array([exact]), np.array([ulps]), None)
        cls, clause, documented = (A.DEFECT if defect[0] else A.UNDOCUMENTED), None, None
        about = f"{table.peer} (this tool knows no contract of its)"
    of = f"{'the gradient of ' if vjp else ''}{op}"
    if cls == A.CONVENTION:
        c = next(c.clause for c in contract.for_output(output) if c.clause.name == clause)
        kind = "documented" if c.documented else "undocumented: only its source says so"
        return cls, (f"{table.peer}'s rule `{c.name}`: {c.says} ({c.source}; {kind}); the "
                     "value is exactly that rule's, where TorchLean's contract differs")
    rel = float(A.relative_error(got, exact))
    if cls == A.UNDOCUMENTED:
        stated = (f"documents {documented:g} ulp for {of}, and the value is within that and "
                  f"the {A.margin(documented):g}-ulp margin" if documented is not None else
                  f"documents no accuracy of {of}")
        return cls, (f"{about} {stated}; the value keeps a correct digit (relative error "
                     f"{_words(rel)}, {_words(ulps)} ulp from the correctly rounded value), "
                     "so it misses TorchLean's bound only")
    if base == E.NAN_MISMATCH:
        said = f"NaN where the exact value is {exact!r}" if np.isnan(got) else \
            f"{got!r} where the exact value is NaN"
        return cls, f"{said}: {about} defines {of} there, and not as that"
    if base == E.INF_MISMATCH:
        said = f"{got!r} where the exact value is {exact!r}"
        return cls, f"an infinity mismatch, {said}: {about} defines {of} there, and not as that"
    if base == E.NOT_BITWISE:
        return cls, (f"{got!r} where the exact value is {exact!r}: {of} selects or copies an "
                     f"input value ({about}), and this is another value")
    if rel >= 1:
        flushed = ", a subnormal result flushed to zero" if got == 0 and exact != 0 else ""
        return cls, (f"no correct digit: |got - exact| >= |exact| (relative error "
                     f"{_words(rel)}{flushed}); {about} states no flush and no such loss")
    return cls, (f"{_words(ulps)} ulp from the correctly rounded value, over {table.peer}'s "
                 f"documented {documented:g} ulp ({contract.accuracy.function}: "
                 f"{contract.accuracy.source}; the kernel calls it: {contract.accuracy.calls}) "
                 f"and its {A.margin(documented):g}-ulp margin")


def _daz(table, data: dict, contract) -> bool:
    """Whether the peer's kernel read subnormal operands as zero (the convention rules' daz, as
    the live judge and classify-peers pass it from the capsule's policy, which a replay file does
    not record): JAX on the CPU (XLA's runtime sets DAZ), and a peer whose contract states a
    flush-to-zero policy for the op (CuPy's -ftz=true NVRTC kernels: cupy_contract.FTZ). Where
    that contract's policy and the entry's declared one could differ (our reductions' are
    implementation-defined), the op has no value convention for daz to change."""
    if table.module == "jax":
        return data.get("device") == "cpu"
    return contract is not None and any(
        pc.field == "subnormals" and pc.value == "flush-to-zero" for pc in contract.policy)


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _table(data: dict, path):
    capsule = data.get("capsule", "")
    prefix = capsule.split(".", 1)[0]
    plugin = data.get("plugin") or ""
    if prefix in OTHER_PLUGINS:
        table = OTHER_PLUGINS[prefix]
        own = next(p for p, t in PEERS.items() if t is table)
        raise ReproducerError(
            f"{_fix(path)} is of capsule `{capsule}`, written by plugin `{plugin or 'none'}`, "
            f"not by {table.plugin} (whose capsules are {own}.*): {prefix}.* is another "
            f"plugin's name, whose functions are not {table.peer}'s expressions here "
            "(conformance/peers/expressions.py), so a script of those would reproduce nothing; "
            "replay it with its own --plugin")
    if prefix not in PEERS or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", capsule):
        raise ReproducerError(
            f"{_fix(path)} is of capsule `{capsule}`; a reproducer is written for a peer's "
            f"({', '.join(f'{p}.* {t.peer}' for p, t in PEERS.items())}); for our own capsules "
            "use `torchlean-conformance replay`")
    table = PEERS[prefix]
    if plugin.split(":", 1)[0] != table.plugin:
        raise ReproducerError(
            f"{_fix(path)} was written by plugin `{plugin or 'none'}`, not by {table.plugin}: "
            f"its {prefix}.* entries may call other functions than {table.peer}'s expressions "
            f"here (conformance/peers/expressions.py), so a script of those would reproduce "
            "nothing; replay it with its own --plugin")
    return table


def _params(case) -> dict:
    out = {}
    for k, v in case.params.items():
        if isinstance(v, np.ndarray):
            out[k] = ("array", v.reshape(-1).tolist(), str(v.dtype), list(v.shape))
        elif isinstance(v, tuple):
            out[k] = list(v)
        else:
            out[k] = v
    return out


def _binds(table, op: str, case, path) -> None:
    """The expression's signature takes the case's inputs and parameters (else the script would
    only ever show a TypeError)."""
    e = expression(table, op)
    stub = eval(f"lambda {e.signature}: None", {})   # noqa: S307 - our table's constant text
    try:
        inspect.signature(stub).bind(*case.inputs, **case.params)
    except TypeError as exc:
        raise ReproducerError(
            f"{_fix(path)}: {table.peer}'s expression of `{op}` ({e.signature}) does not take "
            f"the case's {len(case.inputs)} inputs and parameters {sorted(case.params)} ({exc}); "
            "fix the table in conformance/peers/expressions.py") from None


def _expected_shapes(case, vjp: bool) -> list | None:
    """A whole-case finding's output shapes under the contract: the inputs' for a VJP, else the
    reference's output (None where it cannot say)."""
    if vjp:
        return [list(a.shape) for a in case.inputs]
    try:
        from conformance.references import get as get_reference
        with np.errstate(all="ignore"):
            value = get_reference(case.op.label).forward(case.inputs, **case.params).value
        return [list(np.shape(value))]
    except Exception:   # noqa: BLE001 - a reference that cannot say leaves the shape unknown
        return None


def _read(path: Path):
    """The replay file's object, its case decoded and checked, and its peer's table."""
    try:
        data = read_replay(path)
        case = decode_case(data["case"])
    except ReplayError as exc:
        raise ReproducerError(str(exc)) from None
    table = _table(data, path)
    try:
        _binds(table, case.op.label, case, path)
    except ExpressionError as exc:
        raise ReproducerError(f"{_fix(path)}: {exc}") from None
    return data, case, table


def findings(path, failure: int | None = None) -> tuple[dict, object, object, list[tuple]]:
    """(data, case, table, [(index, checked failure, class, why)]) of the replay file's failures a
    script can be written for (only failure number `failure` where given); ReproducerError where
    none can, with the first one's reason."""
    path = Path(path)
    data, case, table = _read(path)
    failures = data.get("failures") or []
    if not isinstance(failures, list) or not failures:
        raise ReproducerError(f"{_fix(path)} records no failure to reproduce")
    if failure is not None and not 0 <= failure < len(failures):
        raise ReproducerError(f"--failure {failure}: {_fix(path)} records failures 0 to "
                              f"{len(failures) - 1}")
    out, refusal = [], None
    for i in [failure] if failure is not None else range(len(failures)):
        try:
            f = _checked(failures[i], i, path, case)
            if f["vjp"] and table.autodiff is None:
                raise ReproducerError(
                    f"{_fix(path)}: `failures[{i}]` is a VJP finding, and {table.peer} has no "
                    "autodiff: its plugin's VJP is that plugin's own code, which no expression "
                    "of the peer's reproduces; replay it with the file's `command`")
            if f["vjp"] and f["base"] not in WHOLE_CASE and case.cotangent is None:
                raise ReproducerError(f"{_fix(path)}: `failures[{i}]` is a VJP finding but the "
                                      "case records no cotangent; write the file again with `run`")
        except ReproducerError as exc:
            refusal = refusal or exc
            continue
        out.append((i, f) + finding_class(data, failures[i], f))
    if not out:
        raise refusal
    return data, case, table, out


def _first(found: list[tuple]) -> tuple:
    """The finding a script reproduces by default: the first defect, else the first."""
    return min(found, key=lambda x: (x[2] != A.DEFECT, x[0]))


def spec(path, failure: int | None = None, against: str = "peer") -> Spec:
    """What the script of `path`'s finding holds (module docstring): the first defect, or
    failure number `failure`."""
    path = Path(path)
    if against not in AGAINST:
        raise ReproducerError(f"--against {against!r}: expected one of {', '.join(AGAINST)}")
    data, case, table, found = findings(path, failure)
    i, f, cls, why = _first(found)
    vjp = f["vjp"]
    device = data.get("device", "cpu")
    peer_device = {"jax": "gpu" if device == "cuda" else "cpu"}.get(table.module, "cuda")
    g = None if case.cotangent is None else (f32_bits(case.cotangent), list(case.cotangent.shape))
    common = dict(table=table, op=case.op.label, capsule=data["capsule"], replay_name=path.name,
                  device=peer_device, inputs=[(f32_bits(a), list(a.shape)) for a in case.inputs],
                  params=_params(case), cotangent=g if vjp else None, vjp=vjp,
                  output=f["output"], reason=f["reason"], cls=cls, why=why, against=against)
    if f["base"] in WHOLE_CASE:
        return Spec(element=None, mode="whole", shapes=_expected_shapes(case, vjp), **common)
    mode = "bound" if f["bound"] is not None else \
        "value" if f["base"] == E.NOT_CORRECTLY_ROUNDED else "bits"
    source = ("the harness's bound for this element, from the error model of the policy and "
              "declared bound the peer capsule was audited under (conformance/error_models.py)")
    return Spec(element=f["element"], expected=f["expected"], exact=f["exact"],
                bound=f["bound"], mode=mode, bound_source=source, **common)


def reproducer(path, failure: int | None = None, against: str = "peer") -> str:
    """The script for a finding of a peer's replay file (module docstring)."""
    return script(spec(path, failure, against))


def command_for(replay, reason: str | None = None) -> str | None:
    """`torchlean-conformance reproduce FILE [--failure N]` for the replay file's first failure
    of `reason` (of any, for None) that is a defect of the peer's, whose script exits 1 while it
    stands; None where the file holds no such failure or cannot be read (the report links only
    these)."""
    import shlex
    try:
        *_, found = findings(replay)
    except ReproducerError:
        return None
    default = _first(found)[0]
    for i, f, cls, _ in found:
        if cls == A.DEFECT and reason in (None, f["reason"]):
            return f"torchlean-conformance reproduce {shlex.quote(str(replay))}" + (
                "" if i == default else f" --failure {i}")
    return None


def configure(p) -> None:
    p.add_argument("file", help="a replay file of a peer's capsule (aten.*, xla.*, cupy_peer.*)")
    p.add_argument("--out", default=None,
                   help="write the script here (default: standard output)")
    p.add_argument("--failure", type=int, default=None, metavar="N",
                   help="reproduce the file's failure N (0-based; default: its first defect "
                        "against the peer's own contract, else its first finding)")
    p.add_argument("--against", choices=AGAINST, default="peer",
                   help="peer (default): the script exits 1 only while a defect of the peer's "
                        "stands; torchlean: while the element misses TorchLean's bound")


def main(args) -> int:
    from conformance.jsonfile import write_atomic
    try:
        s = spec(Path(args.file), getattr(args, "failure", None),
                 getattr(args, "against", "peer"))
    except ReproducerError as exc:
        print(f"torchlean-conformance: reproduce: {exc}", file=sys.stderr)
        return 2
    text = script(s)
    decides = s.cls == A.DEFECT or s.against == "torchlean"
    note = (f"{s.table.peer}'s {s.op}, {s.reason}: {s.cls}: {s.why}. " +
            ("The script exits 1 while it fails." if decides else
             "Not a defect of the peer's: the script measures it and exits 0 (--against "
             "torchlean writes one that exits 1 while it misses TorchLean's bound)."))
    if args.out:
        write_atomic(args.out, text)
        print(f"wrote {args.out}: run it where {s.table.install} is installed. {note}")
    else:
        sys.stdout.write(text)
        print(note, file=sys.stderr)
    return 0

