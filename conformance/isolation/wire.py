"""The wire between the judge and a kernel process: framed messages of JSON plus raw array bytes.

Never pickle: unpickling what a hostile kernel process sent would run its code in the judge. A
frame is MAGIC, the header's length (8 bytes, little-endian), the JSON header, then the bytes of
each array the header lists, in order. Arrays and the Python values the harness passes (tuples,
NumPy scalars, non-finite floats) are encoded as tagged JSON objects; only the dtypes in DTYPES
travel. A reader is given a byte budget and refuses, before allocating, a frame that declares more,
so an answer cannot exhaust the judge's memory; the header's size and nesting are capped too.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

import numpy as np

MAGIC = b"TLK1"
HEADER_MAX = 1 << 20            # bytes of JSON a header may have
DEPTH_MAX = 32                  # nesting of a decoded header
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "float32", "float64", "complex64", "complex128"})


class WireError(Exception):
    """A frame that breaks the protocol: truncated, over its budget, or malformed. From a kernel
    process this is the kernel's doing (the judge records it as such), never the harness's."""


class WireClosed(WireError):
    """The other side closed its end before a whole frame arrived."""


class WireTimeout(WireError):
    """No whole frame arrived within the time allowed."""


# --- encoding --------------------------------------------------------------------------------------

def _encode(x, arrays: list):
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        a = np.asarray(x)
        if a.dtype.name not in DTYPES:
            raise WireError(f"an array of dtype {a.dtype} cannot travel; expected one of "
                            f"{', '.join(sorted(DTYPES))}")
        arrays.append(np.ascontiguousarray(a) if a.ndim else a.reshape(()))
        return {"__array__": len(arrays) - 1, "scalar": isinstance(x, np.generic)}
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return {"__float__": repr(x)}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in x]}
    if isinstance(x, list):
        return [_encode(v, arrays) for v in x]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise WireError("dict keys must be strings to travel")
        if any(k.startswith("__") and k.endswith("__") for k in x):
            return {"__dict__": {k: _encode(v, arrays) for k, v in x.items()}}
        return {k: _encode(v, arrays) for k, v in x.items()}
    raise WireError(f"a {type(x).__name__} cannot travel between the judge and a kernel process")


def _decode(x, arrays: list, depth: int = 0):
    if depth > DEPTH_MAX:
        raise WireError(f"a header nested deeper than {DEPTH_MAX} levels")
    if isinstance(x, list):
        return [_decode(v, arrays, depth + 1) for v in x]
    if not isinstance(x, dict):
        return x
    if "__array__" in x:
        i = x["__array__"]
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(arrays):
            raise WireError(f"an array reference {i!r} names no array of the frame")
        a = arrays[i]
        return a[()] if x.get("scalar") is True and a.ndim == 0 else a
    if "__float__" in x:
        text = x["__float__"]
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"a tagged float {text!r} is not nan, inf or -inf")
        return float(text)
    if "__tuple__" in x:
        items = x["__tuple__"]
        if not isinstance(items, list):
            raise WireError("a tagged tuple holds no list")
        return tuple(_decode(v, arrays, depth + 1) for v in items)
    if "__dict__" in x:
        inner = x["__dict__"]
        if not isinstance(inner, dict):
            raise WireError("a tagged dict holds no object")
        return {k: _decode(v, arrays, depth + 1) for k, v in inner.items()}
    return {k: _decode(v, arrays, depth + 1) for k, v in x.items()}


def _frame(message: dict) -> tuple[bytes, list[np.ndarray]]:
    """(MAGIC, the header's length and the header; the arrays whose bytes follow it)."""
    arrays: list[np.ndarray] = []
    body = _encode(message, arrays)
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape), "nbytes": int(a.nbytes)}
            for a in arrays]
    header = json.dumps({"body": body, "arrays": meta}, allow_nan=False).encode()
    return MAGIC + struct.pack("<Q", len(header)) + header, arrays


def encode(message: dict) -> bytes:
    """One frame holding `message` (a dict of the values above)."""
    head, arrays = _frame(message)
    return b"".join([head] + [a.tobytes() for a in arrays])


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]


def send(fd: int, message: dict) -> None:
    """encode(message) written to fd, each array from its own memory (no copy of its bytes: a
    16-bit sweep's shard of results is 256 MiB)."""
    head, arrays = _frame(message)
    _write_all(fd, memoryview(head))
    for a in arrays:
        if a.nbytes:
            _write_all(fd, memoryview(a.reshape(-1)).cast("B"))


# --- decoding --------------------------------------------------------------------------------------

class Reader:
    """Reads frames from a file descriptor with a deadline and a byte budget per frame."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def _read_into(self, buf: memoryview, deadline: float | None) -> None:
        """Fill `buf` (bytes) from the wire, by the deadline."""
        n, done = len(buf), 0
        while done < n:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([self.fd], [], [], wait)[0]:
                    raise WireTimeout(f"no answer within the time allowed ({done} of {n} "
                                      "bytes of a frame arrived)")
            got = os.readv(self.fd, [buf[done:done + (1 << 24)]])
            if not got:
                raise WireClosed(f"the other side closed the wire ({done} of {n} bytes of a "
                                 "frame arrived)")
            done += got

    def _read(self, n: int, deadline: float | None) -> bytes:
        buf = bytearray(n)
        self._read_into(memoryview(buf), deadline)
        return bytes(buf)

    def receive(self, budget: int, timeout: float | None = None) -> dict:
        """The next frame's message. `budget`: the most array bytes it may declare."""
        deadline = None if timeout is None else time.monotonic() + timeout
        head = self._read(len(MAGIC) + 8, deadline)
        if head[:len(MAGIC)] != MAGIC:
            raise WireError(f"a frame starting {head[:len(MAGIC)]!r}, not {MAGIC!r}: something "
                            "else wrote on the wire")
        (size,) = struct.unpack("<Q", head[len(MAGIC):])
        if size > HEADER_MAX:
            raise WireError(f"a frame header of {size} bytes (at most {HEADER_MAX})")
        try:
            header = json.loads(self._read(size, deadline))
        except (ValueError, RecursionError) as exc:
            raise WireError(f"a frame header that is not JSON ({type(exc).__name__})") from None
        if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
            raise WireError("a frame header without its array list")
        metas, total = header["arrays"], 0
        for m in metas:
            ok = (isinstance(m, dict) and m.get("dtype") in DTYPES
                  and isinstance(m.get("shape"), list)
                  and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                          for d in m["shape"]) and isinstance(m.get("nbytes"), int))
            if not ok:
                raise WireError(f"a malformed array description {str(m)[:200]}")
            want = int(np.prod(m["shape"], dtype=object)) * np.dtype(m["dtype"]).itemsize
            if want != m["nbytes"]:
                raise WireError(f"an array of shape {m['shape']} and dtype {m['dtype']} declares "
                                f"{m['nbytes']} bytes, not {want}")
            total += want
        if total > budget:
            raise WireError(f"a frame declaring {total} bytes of arrays, over its budget of "
                            f"{budget}")
        arrays = []
        for m in metas:     # read straight into the array's own memory
            a = np.empty(m["shape"], dtype=m["dtype"])
            if a.nbytes:
                self._read_into(memoryview(a.reshape(-1)).cast("B"), deadline)
            arrays.append(a)
        body = _decode(header.get("body"), arrays)
        if not isinstance(body, dict):
            raise WireError("a frame whose body is not an object")
        return body
