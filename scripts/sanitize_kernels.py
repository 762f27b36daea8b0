"""Which native kernels a sanitizer run reached, and a test selection that reaches them all: every `extern "C" __global__` kernel of
engine/csrc/cuda/ (written out, or stamped by a kernel-defining macro), and the kernels the test
processes fetched from the loader (tests/conftest.py writes them where KERNEL_LOG_ENV says). A
sanitizer checks only kernels that run, so scripts/sanitize.py prints how many of all it reached
and names the rest."""
from __future__ import annotations

import re
import sys
from pathlib import Path

KERNEL_LOG_ENV = "TORCHLEAN_KERNEL_LOG_DIR"   # tests/conftest.py writes kernels.<pid>.txt there
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
                     r'(\w+)\s*\(')
_DEFINE = re.compile(r"^[ \t]*#define[ \t]+(\w+)\(([^)]*)\)((?:.*\\\n)*.*)$", re.M)


def kernels_in(text: str) -> set[str]:
    """The kernel symbols one source text defines: written out, or as the first argument of a
    macro whose body defines a kernel named by that parameter."""
    found, macros = set(), []
    for m in _DEFINE.finditer(text):
        params = [p.strip() for p in m.group(2).split(",")]
        body = _KERNEL.search(m.group(3))
        if body and body.group(1) in params:
            macros.append((m.group(1), params.index(body.group(1))))
    plain = _DEFINE.sub("", text)
    found.update(_KERNEL.findall(plain))
    for name, index in macros:
        for call in re.finditer(rf"^[ \t]*{name}\(([^)]*)\)", plain, re.M):
            args = [a.strip() for a in call.group(1).split(",")]
            if len(args) > index:
                found.add(args[index])
    return found


_INCLUDE = re.compile(r'^[ \t]*#include[ \t]+"([\w.]+)"[^\n]*$', re.M)


def _with_headers(path: Path, seen: set | None = None) -> str:
    """The source with its local headers written in (their kernel macros stamp kernels here)."""
    seen = set() if seen is None else seen
    seen.add(path.name)

    def inline(m: re.Match) -> str:
        header = path.parent / m.group(1)
        if m.group(1) in seen or not header.is_file():
            return ""
        return _with_headers(header, seen)
    return _INCLUDE.sub(inline, path.read_text())


def all_kernels(root: Path) -> set[tuple[str, str]]:
    """(file, symbol) of every kernel in root/engine/csrc/cuda/*.cu."""
    out = set()
    for path in sorted((root / "engine" / "csrc" / "cuda").glob("*.cu")):
        out |= {(path.name, k) for k in kernels_in(_with_headers(path))}
    return out


def reached(log_dir: Path) -> set[tuple[str, str]]:
    """(file, symbol) of every kernel some test process fetched (each line `file:symbol`)."""
    out = set()
    for path in log_dir.glob("kernels.*.txt"):
        for line in path.read_text().splitlines():
            file, _, symbol = line.strip().partition(":")
            if symbol:
                out.add((file, symbol))
    return out


def write_reached(log_dir: Path, kernels, pid: int, firsts=()) -> None:
    """Append what one test process fetched (loader._kernels' keys) for reached() to gather,
    and, per test, (node id, seconds, the kernels it fetched first in this process) for
    select(). Appended test by test, so a run stopped at its time limit keeps what it reached."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"kernels.{pid}.txt", "a") as f:
        f.write("".join(f"{file}:{sym}\n" for file, sym in sorted(kernels)))
    if firsts:
        with open(log_dir / f"firsts.{pid}.tsv", "a") as f:
            f.write("".join(
                f"{node}\t{seconds:.3f}\t{' '.join(f'{a}:{b}' for a, b in new)}\n"
                for node, seconds, new in firsts))


def select(log_dir: Path) -> list[str]:
    """A test selection that reaches every kernel the logged run reached: each kernel's first
    fetch in a process names a test that launches it, so those tests cover the run; picked
    greedily by kernels gained per second, in the run's order."""
    tests: dict[str, tuple[float, set]] = {}
    for path in sorted(log_dir.glob("firsts.*.tsv")):
        for line in path.read_text().splitlines():
            node, seconds, kernels = (line.split("\t") + ["", ""])[:3]
            if kernels.strip():
                old = tests.get(node, (0.0, set()))
                tests[node] = (max(old[0], float(seconds)), old[1] | set(kernels.split()))
    left = set().union(*(k for _, k in tests.values())) if tests else set()
    chosen = []
    while left:
        node = max(tests, key=lambda n: len(tests[n][1] & left) / (tests[n][0] + 0.5))
        chosen.append(node)
        left -= tests.pop(node)[1]
    return sorted(chosen)


def coverage_line(total: set, got: set, limit: int = 40) -> str:
    """`kernels reached: N of M` and the ones not reached (the first `limit`)."""
    missed = sorted(total - got)
    line = f"kernels reached: {len(total & got)} of {len(total)}"
    if missed:
        names = ", ".join(f"{f}:{s}" for f, s in missed[:limit])
        more = f" and {len(missed) - limit} more" if len(missed) > limit else ""
        line += f"; not reached (no sanitizer checked them): {names}{more}"
    return line


class NoKernelLog(Exception):
    """`select` was given a directory that holds no kernel log of a test run."""


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "select":
        print("usage: python scripts/sanitize_kernels.py select LOG_DIR  (a GPU test run's "
              f"{KERNEL_LOG_ENV}: prints a kernel-complete selection, one node id a line)",
              file=sys.stderr)
        return 2
    log_dir = Path(argv[1])
    try:
        if not any(log_dir.glob("firsts.*.tsv")):
            raise NoKernelLog(
                f"'{log_dir}' holds no firsts.*.tsv: it is not the kernel log of a test run; "
                f"expected the {KERNEL_LOG_ENV} of one (run `{KERNEL_LOG_ENV}=DIR pytest -m cuda "
                "tests/` on a GPU, then select DIR)")
    except NoKernelLog as exc:
        print(f"sanitize_kernels.py: NoKernelLog: {exc}", file=sys.stderr)
        return 2
    try:
        for node in select(log_dir):
            print(node)
    except BrokenPipeError:      # `| head`: the reader has what it wanted
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
