"""Replay files: one shrunk counterexample (`torchlean-conformance replay FILE`), written by the
campaign and meant to be shared. A replay file is data, never code: reading one checks every field
(types, ranges, the parameters its op takes) and the case's declared size against a cap before an
array is allocated, and the plugin a file names is imported only when the user names it too
(replay_cli.py). Every problem is a ReplayError naming the field, what it holds and what to do."""
from __future__ import annotations

import inspect
import math
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance.formats import REPLAY_FORMAT
from conformance.generators import Case
from conformance.jsonfile import UnusableFileError, read_tagged, write_atomic
from conformance.families import CONTRACTS_ENV, SPECS, by_label
from conformance.replay_sizes import GeometryError, output_elements
from engine.float32 import FLT_MAX

# 2^26 float32 elements (256 MiB per copy): far above any shrunk case, far below what makes the
# mpmath references or the host run out of memory; `replay --max-elements N` raises it.
DEFAULT_MAX_ELEMENTS = 2 ** 26
_REWRITE = "rerun the campaign to write the file again, or fix the field"
_HEX32 = re.compile(r"0[xX][0-9a-fA-F]{1,8}")      # float32 bits: at most 32 of them
_INT64 = (-2 ** 63, 2 ** 63 - 1)
_OPS = {spec.op.label: spec.op for spec in SPECS}   # BackendOp and RuntimeEntry labels alike


class ReplayError(Exception):
    """A replay file that cannot be read, names a capsule or plugin this command will not load, or
    holds a case that is malformed or larger than the cap."""


class ReplayCaseError(ReplayError):
    """A field of a replay file's case that does not hold what the case format says."""


class ReplayTooLargeError(ReplayError):
    """A case whose declared arrays and output exceed `--max-elements`."""


@dataclass(frozen=True)
class ArrayHeader:
    """An encoded array's dtype and shape, checked before its data is read or allocated."""
    dtype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


# --- writing --------------------------------------------------------------------------------------

def _enc_array(a: np.ndarray) -> dict:
    a = np.asarray(a)
    if a.dtype == np.float32:
        data = [f"0x{int(v):08x}" for v in a.view(np.uint32).reshape(-1)]
    else:
        data = a.reshape(-1).tolist()
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": data}


def encode_case(case: Case) -> dict:
    params = {}
    for k, v in case.params.items():
        if isinstance(v, np.ndarray):
            params[k] = {"__array__": _enc_array(v)}
        elif isinstance(v, tuple):
            params[k] = list(v)
        else:
            params[k] = v
    return {"op": case.op.label, "class": case.cls, "seed": case.seed, "index": case.index,
            "note": case.note, "inputs": [_enc_array(a) for a in case.inputs], "params": params,
            "cotangent": None if case.cotangent is None else _enc_array(case.cotangent),
            "offsets": None if case.offsets is None else list(case.offsets)}


def replay_command(path: Path, plugin: str | None) -> str:
    """The shell command that replays `path`; a plugin's file needs the user's own --plugin (and
    the op contracts this run loaded, for ops the engine does not have)."""
    named = f"--plugin {shlex.quote(plugin)} " if plugin else ""
    contracts = os.environ.get(CONTRACTS_ENV, "")
    if plugin and contracts:
        named += f"--op-contracts {shlex.quote(contracts)} "
    return f"torchlean-conformance replay {named}{shlex.quote(str(path))}"


def write_replay(path: Path, capsule_name: str, case: Case, failures: list, plugin: str | None,
                 device: str) -> str:
    """Write a replay file; returns the command that replays it."""
    command = replay_command(path, plugin)
    write_atomic(path, {"format": REPLAY_FORMAT, "version": 1, "capsule": capsule_name,
                        "plugin": plugin, "device": device, "case": encode_case(case),
                        "reasons": sorted({f.reason for f in failures}),
                        "failures": [f.to_json() for f in failures[:5]], "command": command})
    return command


# --- reading --------------------------------------------------------------------------------------

def read_replay(path: Path) -> dict:
    """The file's object, its top-level fields checked (the case is checked by decode_case)."""
    fix = "pass a file that `torchlean-conformance run` wrote under <evidence-dir>/replays/"
    try:
        data = read_tagged(path, "format", REPLAY_FORMAT, "a replay file", fix)
    except UnusableFileError as exc:
        raise ReplayError(f"cannot read replay file {exc}") from None
    if not isinstance(data.get("case"), dict) or not isinstance(data.get("capsule"), str):
        raise ReplayError(f"replay file {path} has no `case` object or `capsule` name; {fix}")
    data.setdefault("device", "cpu")
    for field, ok, expected in (
            ("plugin", lambda v: v is None or (isinstance(v, str) and v), "a MODULE:ATTR string "
                                                                          "or null"),
            ("device", lambda v: isinstance(v, str), "a device name such as \"cpu\""),
            ("reasons", lambda v: v is None or (isinstance(v, list) and
                                               all(isinstance(r, str) for r in v)),
             "a list of failure reasons")):
        if not ok(data.get(field)):
            raise ReplayError(f"replay file {path}: `{field}` holds {_shown(data.get(field))}, "
                              f"expected {expected}; {fix}")
    return data


def _shown(value, limit: int = 60) -> str:
    text = f"{type(value).__name__} {value!r}"
    return text if len(text) <= limit else text[:limit] + "..."


def _bad(field: str, value, expected: str) -> ReplayCaseError:
    return ReplayCaseError(f"`{field}` holds {_shown(value)}, expected {expected}; {_REWRITE}")


def _whole(value, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(field, value, f"a whole number from {lo} to {hi}")
    return value


def _ints(value, field: str, lo: int = _INT64[0]) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _bad(field, value, "a list of whole numbers")
    return tuple(_whole(v, f"{field}[{i}]", lo, _INT64[1]) for i, v in enumerate(value))


# Parameter kinds by name: every keyword a reference's forward takes has one (a test holds every
# reference to this table). A parameter whose reference default is None may also be null.
INT, SEED, BOOL, NUMBER, INTS, BOOL_ARRAY, INDEX_ARRAY = ("int", "seed", "bool", "number", "ints",
                                                          "bool array", "index array")
PARAM_KINDS = {
    **dict.fromkeys(("axis", "start", "stop", "heads", "groups", "n"), INT),
    "seed": SEED,
    **dict.fromkeys(("keepdims", "trans_a", "trans_b", "causal"), BOOL),
    **dict.fromkeys(("eps", "alpha", "lo", "hi", "p", "beta", "scale"), NUMBER),
    **dict.fromkeys(("axes", "shape", "perm", "kernel_size", "stride", "padding", "dilation"),
                    INTS),
    "mask": BOOL_ARRAY,
    **dict.fromkeys(("indices", "targets"), INDEX_ARRAY),
}
# The least value of whole-number parameters (and of each entry of a list) the ops accept
# (docs/OPS.md); the others take any int64 (negative axes count from the end).
LEAST = {"groups": 1, "heads": 1, "n": 1, "kernel_size": 1, "stride": 1, "dilation": 1,
         "padding": 0, "shape": 0, "perm": 0}


def _as_f32(x: float) -> float:
    with np.errstate(over="ignore"):   # float parameters are rounded to float32 before use
        return float(np.float32(x))


# What the ops accept of number parameters, as the engine's wrappers check it; any other number
# parameter may be anything but NaN (clamp's bounds may be infinite).
NUMBER_RULES = {
    "eps": (lambda x: 0 < _as_f32(x) <= FLT_MAX, "a positive number that float32 holds"),
    "beta": (lambda x: math.isfinite(_as_f32(x)) and _as_f32(x) != 0,
             "a number that stays finite and nonzero in float32"),
    "scale": (lambda x: math.isfinite(x) and abs(x) <= FLT_MAX,
              "a finite number that float32 holds"),
    "p": (lambda x: 0 <= x <= 1, "a probability from 0 to 1"),
}
_NOT_NAN = (lambda x: not math.isnan(x), "a number, not NaN")
# The pooling references take **params: these are the names they read.
POOL_PARAMS = ("kernel_size", "stride", "padding", "dilation")
_ARRAY_DTYPE = {BOOL_ARRAY: "bool", INDEX_ARRAY: "int64"}


def op_parameters(op_label: str) -> tuple[dict[str, bool], set[str]]:
    """The keywords the op's reference takes (name -> whether it may be null, i.e. defaults to
    None) and those of them it requires (no default)."""
    from conformance.references import get as get_reference
    accepted, required = {}, set()
    for p in list(inspect.signature(get_reference(op_label).forward).parameters.values())[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            accepted.update(dict.fromkeys(POOL_PARAMS, False))
            required.update(POOL_PARAMS)
            continue
        accepted[p.name] = p.default is None
        if p.default is inspect.Parameter.empty:
            required.add(p.name)
    return accepted, required


def _array_header(d, field: str, dtypes: tuple[str, ...]) -> ArrayHeader:
    """The dtype and shape of an encoded array, checked without reading its data."""
    if not isinstance(d, dict) or not {"dtype", "shape", "data"} <= set(d):
        raise _bad(field, d, "an array object {\"dtype\", \"shape\", \"data\"}")
    if d["dtype"] not in dtypes:
        raise _bad(f"{field}.dtype", d["dtype"], " or ".join(repr(t) for t in dtypes))
    if not isinstance(d["data"], list):
        raise _bad(f"{field}.data", d["data"], "a list of elements")
    return ArrayHeader(d["dtype"], _ints(d["shape"], f"{field}.shape", lo=0))


def _array_data(d: dict, field: str, header: ArrayHeader) -> np.ndarray:
    data, dtype, shape = d["data"], header.dtype, header.shape
    if len(data) != math.prod(shape):
        raise ReplayCaseError(f"`{field}.data` holds {len(data)} elements but its shape "
                              f"{list(shape)} needs {math.prod(shape)}; {_REWRITE}")
    for i, v in enumerate(data):
        if dtype == "float32":
            ok = isinstance(v, str) and _HEX32.fullmatch(v)
        elif dtype == "bool":
            ok = isinstance(v, bool)
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]
        if not ok:
            expected = {"float32": "the bits of a float32 as hex, 0x00000000 to 0xffffffff",
                        "bool": "true or false"}.get(dtype, "a whole number that int64 holds")
            raise _bad(f"{field}.data[{i}]", v, expected)
    if dtype == "float32":
        return np.array([int(h, 16) for h in data], dtype=np.uint32).view(np.float32) \
            .reshape(shape)
    return np.array(data, dtype=dtype).reshape(shape)


def _check_param(name: str, value, kind: str, nullable: bool, field: str):
    """A parameter's value checked against its kind; an array comes back as its ArrayHeader (for
    the size check), decoded later."""
    if value is None and nullable:
        return None
    if kind == INT:
        return _whole(value, field, LEAST.get(name, _INT64[0]), _INT64[1])
    if kind == SEED:
        return _whole(value, field, 0, 2 ** 64 - 1)
    if kind == BOOL:
        if not isinstance(value, bool):
            raise _bad(field, value, "true or false")
        return value
    if kind == NUMBER:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(field, value, "a number")
        accepts, expected = NUMBER_RULES.get(name, _NOT_NAN)
        if not accepts(value):
            raise _bad(field, value, expected)
        return value
    if kind == INTS:
        return _ints(value, field, LEAST.get(name, _INT64[0]))
    if not isinstance(value, dict) or set(value) != {"__array__"}:
        raise _bad(field, value, f"an array {{\"__array__\": {{...}}}} of "
                                 f"{_ARRAY_DTYPE[kind]}" + (" or null" if nullable else ""))
    return _array_header(value["__array__"], f"{field}.__array__", (_ARRAY_DTYPE[kind],))


def _check_params(op_label: str, params, field: str) -> dict:
    if not isinstance(params, dict):
        raise _bad(field, params, "an object of named parameters")
    accepted, required = op_parameters(op_label)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ReplayCaseError(f"`{field}.{unknown[0]}`: op `{op_label}` takes no parameter "
                              f"`{unknown[0]}`; it takes {', '.join(accepted) or 'none'}; "
                              f"{_REWRITE}")
    missing = sorted(required - set(params))
    if missing:
        raise ReplayCaseError(f"`{field}` lacks `{missing[0]}`, which op `{op_label}` needs; "
                              f"{_REWRITE}")
    return {k: _check_param(k, v, PARAM_KINDS[k], accepted[k], f"{field}.{k}")
            for k, v in params.items()}


def _checked_fields(d) -> tuple:
    """(op, cls, seed, index, note, input headers, cotangent header, checked params)."""
    if not isinstance(d, dict):
        raise _bad("case", d, "an object")
    missing = [k for k in ("op", "class", "seed", "index", "inputs", "params", "cotangent")
               if k not in d]
    if missing:
        raise ReplayCaseError(f"`case` lacks `{missing[0]}`; {_REWRITE}")
    user = by_label(d["op"]) if isinstance(d["op"], str) and d["op"] not in _OPS else None
    if d["op"] not in _OPS and user is None:
        raise _bad("case.op", d["op"], f"an op name ({', '.join(_OPS)}), or a user op whose "
                                       "contract --op-contracts loads")
    if not isinstance(d["class"], str):
        raise _bad("case.class", d["class"], "a generator class name")
    seed = _whole(d["seed"], "case.seed", 0, 2 ** 64 - 1)
    index = _whole(d["index"], "case.index", 0, _INT64[1])
    note = d.get("note", "")
    if not isinstance(note, str):
        raise _bad("case.note", note, "a string")
    if not isinstance(d["inputs"], list):
        raise _bad("case.inputs", d["inputs"], "a list of float32 arrays")
    inputs = [_array_header(a, f"case.inputs[{i}]", ("float32",))
              for i, a in enumerate(d["inputs"])]
    cotangent = None if d["cotangent"] is None else \
        _array_header(d["cotangent"], "case.cotangent", ("float32",))
    params = _check_params(d["op"], d["params"], "case.params")
    op = user.op if user is not None else _OPS[d["op"]]
    return op, d["class"], seed, index, note, inputs, cotangent, params


def _sizes(op_label: str, inputs, cotangent, params) -> list[tuple[str, int]]:
    """(field, declared elements) of every array, shape parameter and the op's output where that
    can outgrow the inputs: what replaying the case allocates at least."""
    sizes = [(f"case.inputs[{i}].shape {list(h.shape)}", h.elements)
             for i, h in enumerate(inputs)]
    if cotangent is not None:
        sizes.append((f"case.cotangent.shape {list(cotangent.shape)}", cotangent.elements))
    for k, v in params.items():
        if isinstance(v, ArrayHeader):
            sizes.append((f"case.params.{k}.__array__.shape {list(v.shape)}", v.elements))
        elif k == "shape":
            sizes.append((f"case.params.shape {list(v)}", math.prod(max(s, 0) for s in v)))
    try:
        out = output_elements(op_label, [h.shape for h in inputs], params)
    except GeometryError as exc:
        where = f"case.{exc.field}" if exc.field.startswith("inputs") else \
            f"case.params.{exc.field}"
        raise ReplayCaseError(f"`{where}`: {exc}; {_REWRITE}") from None
    if out is not None:
        sizes.append(out)
    return sizes


def decode_case(d, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Case:
    """The case a replay file holds: every field checked, and its declared size (arrays, shape
    parameters, the op's output) against `max_elements`, before any array is allocated."""
    op, cls, seed, index, note, inputs, cotangent, params = _checked_fields(d)
    sizes = _sizes(op.label, inputs, cotangent, params)
    total = sum(n for _, n in sizes)
    if total > max_elements:
        field, largest = max(sizes, key=lambda s: s[1])
        raise ReplayTooLargeError(
            f"the case declares {total} elements, more than the cap of {max_elements} per case "
            f"(largest: {field}, {largest} elements); shrunk counterexamples are far smaller: "
            f"to replay this one anyway (it needs at least {4 * total / 2 ** 30:.3g} GiB), pass "
            f"--max-elements {total}")
    arrays = [_array_data(a, f"case.inputs[{i}]", header)
              for i, (a, header) in enumerate(zip(d["inputs"], inputs))]
    decoded = {}
    for k, v in params.items():
        if isinstance(v, ArrayHeader):
            v = _array_data(d["params"][k]["__array__"], f"case.params.{k}.__array__", v)
        decoded[k] = v
    g = None if cotangent is None else _array_data(d["cotangent"], "case.cotangent", cotangent)
    return Case(op, cls, tuple(arrays), decoded, g, seed, index, note,
                _offsets(d.get("offsets"), len(arrays)))


def _offsets(value, n: int) -> tuple[int, ...] | None:
    """A misaligned case's byte offsets (conformance/misalign.py): one per input, each 0 to 60
    and a multiple of 4 (a float32's alignment), or None."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n or not all(
            isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= 60 and o % 4 == 0
            for o in value):
        raise _bad("case.offsets", value, f"null or {n} byte offset(s), multiples of 4 from 0 "
                                          "to 60")
    return tuple(value)
