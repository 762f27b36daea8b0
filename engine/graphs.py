"""CUDA graph replay of a whole step (forward, backward, optimizer update).

`capture(step, inputs)` runs `step(*static_inputs)` once eagerly (the warm-up: kernels compile,
plans are accepted, caches fill, and the allocator measures how many blocks of each size the step
holds at once), reserves those blocks, then captures a second run on a side stream into a CUDA
graph. `replay(*arrays)` copies new data into the static inputs, launches the graph (no Python per
op) and returns the step's outputs, which live in static buffers the replay overwrites.

What a graph holds is fixed at capture: kernel arguments, launch shapes, the accepted plan's
kernels and the reduction mode's choices. So a capture is keyed on the input shapes, the capsules
the step ran and the deterministic-reductions mode; a replay under another key captures again
(`recapture=True`, the default: one graph per key) or raises GraphKeyError. Inside a capture
nothing may synchronise, read back to the host, upload from host memory or allocate from the
driver: the allocator serves the capture from the graph's own pool, and each of those raises a
GraphCaptureError naming the op that did it. Closing the graph (or dropping it) gives its pool
back to the cache.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import GraphCaptureError, GraphKeyError
from engine.indices import CheckedIndices, check_host
from engine.runtime.capture_state import CAPTURE, START as _START
from engine.runtime.deterministic import get_deterministic_reductions
from engine.session import current_session
from engine.tensor import Tensor
from engine.types import Device


def _who() -> str:
    return f"op `{CAPTURE.op}`"


def _where() -> str:
    return f"the captured step, at or after op `{CAPTURE.op}`,"


@dataclass(frozen=True)
class GraphKey:
    shapes: tuple[tuple[int, ...], ...]
    profile: str
    capsules: tuple[tuple[str, str], ...]   # (op, capsule) the step ran, sorted
    deterministic: bool

    def difference(self, other: "GraphKey") -> str:
        for name in ("shapes", "profile", "capsules", "deterministic"):
            a, b = getattr(self, name), getattr(other, name)
            if a != b:
                return f"{name} {b} (captured under {a})"
        return "nothing"


def _cupy():
    import cupy
    return cupy


class _Captured:
    """One graph: its static inputs and outputs, its CuPy graph and its allocator pool."""

    def __init__(self, step, arrays, like=None) -> None:
        session = current_session()
        if session.device is not Device.cuda:
            raise GraphCaptureError(
                f"engine.graphs.capture needs a CUDA session; the current session runs on "
                f"`{session.device.label}`: use engine.Session('cuda'), or run the step eagerly")
        cp = _cupy()
        from engine.runtime.allocator import install
        self.cache = install()
        like = like or (None,) * len(arrays)
        self.inputs = tuple(_static_input(session, a, t) for a, t in zip(arrays, like))
        # Warm-up and sizing: a real step, eager, on the current stream; its outputs are this
        # call's result.
        CAPTURE.ops, CAPTURE.op, CAPTURE.recording = {}, _START, True
        self.cache.begin_sizing()
        try:
            self.warmup_outputs = step(*self.inputs)
        finally:
            need = self.cache.end_sizing()
            CAPTURE.recording = False
        warm_ops = dict(CAPTURE.ops)
        cp.cuda.get_current_stream().synchronize()
        self.cache.reserve(need)
        self.pool = self.cache.open_pool(_who)
        self.stream = cp.cuda.Stream(non_blocking=True)
        # Thread-local mode: an unsafe call from this thread (a cudaMalloc, a synchronous copy)
        # invalidates the capture with an error instead of running outside the graph.
        mode = getattr(cp.cuda.runtime, "streamCaptureModeThreadLocal", 1)
        CAPTURE.ops, CAPTURE.op = {}, _START
        self.cache.capture_pool = self.pool
        CAPTURE.recording = CAPTURE.active = True
        try:
            with self.stream:
                self.stream.begin_capture(mode)
                try:
                    outputs = step(*self.inputs)
                except BaseException as exc:
                    _abort(self.stream)
                    raise _named(exc) from exc
                self.graph = self.stream.end_capture()
        except BaseException:
            self.cache.capture_pool = None
            self.cache.close_pool(self.pool)
            self.pool = None
            raise
        finally:
            CAPTURE.recording = CAPTURE.active = False
            self.cache.capture_pool = None
        if CAPTURE.ops != warm_ops:
            self.close()
            raise GraphCaptureError(
                "the captured run of the step ran other ops or capsules than its warm-up "
                f"({sorted(o.label for o in CAPTURE.ops)} vs {sorted(o.label for o in warm_ops)});"
                " a step must run the same ops every time to be replayed")
        self.outputs = outputs
        self.key = GraphKey(tuple(_shape(t) for t in self.inputs), session.profile.name,
                            tuple(sorted((o.label, c) for o, c in CAPTURE.ops.items())),
                            get_deterministic_reductions())
        self.ops = tuple(CAPTURE.ops)
        self.replays = 0

    def launch(self, arrays) -> None:
        cp = _cupy()
        stream = cp.cuda.get_current_stream()
        for t, a in zip(self.inputs, arrays):
            _copy_into(cp, t, a)
        self.graph.launch(stream)
        self.replays += 1

    def close(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.graph = self.outputs = self.warmup_outputs = None
            self.inputs = ()
            self.cache.close_pool(self.pool)
            self.pool = None


def _abort(stream) -> None:
    try:
        stream.end_capture()
    except Exception:   # an invalidated capture ends with an error: it is discarded either way
        pass


def _named(exc: BaseException) -> BaseException:
    if isinstance(exc, GraphCaptureError):
        return exc
    text = str(exc)
    # CUDA's capture errors, and CuPy's own refusals ("the current stream is capturing, ...",
    # "... during stream capture is currently unsupported")
    if type(exc).__name__ == "CUDARuntimeError" or "captur" in text.lower():
        return GraphCaptureError(
            f"{_where()} did work a CUDA graph cannot hold ({type(exc).__name__}: {text}): a "
            "synchronisation, a read back to the host (.item(), .numpy(), float()) or an upload "
            "from host memory; do it outside the captured step (read outputs after replay(), "
            "pass data through the graph's inputs)")
    return exc


def _shape(x, like=None) -> tuple[int, ...]:
    """The key's shape of an input: an index input's (its count), a tensor's or array's own."""
    if isinstance(x, CheckedIndices) or isinstance(like, CheckedIndices):
        return (int(x.size),)
    return tuple(getattr(x, "shape", ()))


def _static_input(session, a, like=None):
    """A static input holding a copy of `a`: a Tensor for a Tensor or a float array, a
    CheckedIndices for indices (`a` itself checked, or host integers checked against `like`'s
    bound)."""
    cp = _cupy()
    if isinstance(a, CheckedIndices):
        return CheckedIndices(cp.array(a.data, dtype=cp.int64).reshape(-1), a.upper)
    if isinstance(like, CheckedIndices):
        return CheckedIndices.upload(a, like.upper, "graph replay indices")
    if isinstance(a, Tensor):
        src, shape = a.buffer.data, a.shape
    else:
        src, shape = a, tuple(getattr(a, "shape", ()))
    data = cp.array(src, dtype=cp.float32).reshape(-1)
    from engine.runtime.buffer import AnyBuffer
    return Tensor(AnyBuffer(data, session.device), shape)


def _copy_into(cp, t, a) -> None:
    if _shape(a, t) != _shape(t):
        raise GraphKeyError(f"replay input of shape {_shape(a, t)} into a static input of shape "
                            f"{_shape(t)}")
    if isinstance(t, CheckedIndices):
        if isinstance(a, CheckedIndices):
            if a.upper > t.upper:
                raise GraphKeyError(f"replay indices checked against {a.upper} into a static "
                                    f"input whose ops take indices below {t.upper}")
            t.data[...] = a.data.reshape(-1)
        else:   # host integers: checked against the static input's bound, then one copy
            t.data.set(check_host(a, t.upper, "graph replay indices"))
        return
    src = a.buffer.data if isinstance(a, Tensor) else a
    if isinstance(src, cp.ndarray):
        t.buffer.data[...] = src.reshape(-1)
    else:   # a host array: one copy to the device, ordered on the current stream
        t.buffer.data.set(_host_f32(src).reshape(-1))


def _host_f32(a):
    import numpy as np
    return np.ascontiguousarray(a, dtype=np.float32)


class CapturedGraph:
    """A step captured once per key and replayed. `replay(*inputs)` returns the step's outputs
    (static: the next replay overwrites them); `close()` frees every graph and its pool."""

    def __init__(self, step, inputs, recapture: bool = True) -> None:
        self.step = step
        self.recapture = recapture
        self._graphs: dict[GraphKey, _Captured] = {}
        first = _Captured(step, inputs)
        self._graphs[first.key] = first
        self.current = first

    @property
    def key(self) -> GraphKey:
        return self.current.key

    @property
    def outputs(self):
        return self.current.outputs

    @property
    def warmup_outputs(self):
        return self.current.warmup_outputs

    def _key_now(self, arrays) -> GraphKey:
        session = current_session()
        statics = self.current.inputs
        shapes = tuple(_shape(a, t) for a, t in zip(arrays, statics)) if arrays else \
            tuple(_shape(t) for t in statics)
        capsules = tuple(sorted((op.label, session.kernel_for(op).capsule.name)
                                for op in self.current.ops))
        return GraphKey(shapes, session.profile.name, capsules, get_deterministic_reductions())

    def replay(self, *arrays):
        """Copy `arrays` into the static inputs (none: keep what they hold), run the step's
        graph for this key (capturing it first if the key is new) and return its outputs."""
        if arrays and len(arrays) != len(self.current.inputs):
            raise GraphKeyError(f"replay() got {len(arrays)} inputs, the step was captured with "
                                f"{len(self.current.inputs)}; pass one array per input")
        key = self._key_now(arrays)
        graph = self._graphs.get(key)
        if graph is None:
            if not self.recapture:
                raise GraphKeyError(
                    f"replay under {self.current.key.difference(key)}: the graph was captured "
                    "with recapture=False; capture again for the new key")
            graph = _Captured(self.step, arrays or self.current.inputs, self.current.inputs)
            self._graphs[graph.key] = graph
            # The new capture's warm-up ran the step once, eagerly: that is this call's step.
            self.current = graph
            return graph.warmup_outputs
        self.current = graph
        graph.launch(arrays)
        return graph.outputs

    def close(self) -> None:
        for graph in self._graphs.values():
            graph.close()
        self._graphs.clear()

    def __del__(self) -> None:   # a dropped graph gives its pool back
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def capture(step, inputs, recapture: bool = True) -> CapturedGraph:
    """Run `step(*static_inputs)` once eagerly (its outputs: `.warmup_outputs` of the first
    graph) and capture the next run of it into a CUDA graph; replay() runs the steps after."""
    return CapturedGraph(step, inputs, recapture)
