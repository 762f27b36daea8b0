"""What every GPU benchmark here measures with: CUDA-event medians and relative L2 errors.

Device work is asynchronous, so a time is read from events recorded on the stream around a loop of
calls after a warm-up (module load, compilation, plans and handles stay out of it), and the median
of several such loops is reported (cf. the device library's METHOD.md)."""
from __future__ import annotations

import statistics


def event_ms(cp, fn, iters: int, repeats: int, warmup: int = 2) -> float:
    """Median milliseconds per call of `fn` from CUDA events around `iters` calls."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    samples = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / iters)
    return statistics.median(samples)


def rel_err(cp, got, ref64) -> float:
    """||got - ref|| / ||ref|| in float64 (0 when both are empty or zero)."""
    got = cp.asarray(got, dtype=cp.float64).reshape(-1)
    ref = cp.asarray(ref64, dtype=cp.float64).reshape(-1)
    norm = float(cp.linalg.norm(ref))
    diff = float(cp.linalg.norm(got - ref))
    return diff / norm if norm else diff
