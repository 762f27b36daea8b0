"""What every GPU benchmark here measures with: CUDA-event medians and relative L2 errors.

Device work is asynchronous, so a time is read from events recorded on the stream around a loop of
calls after a warm-up (module load, compilation, plans and handles stay out of it), and the median
of several such loops is reported (cf. the device library's METHOD.md)."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


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


def output_arguments(parser: argparse.ArgumentParser, quick_help: str) -> None:
    """--json, --table and --quick, as every benchmark here takes them."""
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--table", default=None, help="write the table here too")
    parser.add_argument("--quick", action="store_true", help=quick_help)


def emit(args, text: str, payload: dict) -> None:
    """Print the table; write it and the numbers where --table and --json ask."""
    print(text)
    if args.table:
        Path(args.table).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=1))
