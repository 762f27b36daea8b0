"""Small stand-ins for the records a `torchlean-conformance flags` run writes under
<dir>/<set>/<mode>/ (only the fields conformance/flag_matrix.py reads), and one scenario of them:
exp flushes under ftz and fast-math, reshape copies (nothing to flush), reduce_sum's atomics
declare no gradual underflow, add under fast-math passes its default-policy cell although it
flushed (an expectation not met)."""
from __future__ import annotations

import json
from pathlib import Path

from conformance import flag_matrix as fm

CAPSULES = ["native_cuda.exp", "native_cuda.reshape", "native_cuda.reduce_sum", "native_cuda.add"]
SETS = ["default", "ftz", "fast-math"]


def write_record(root: Path, flag_set: str, mode: str, capsule: str, status: str = "passed",
                 reasons: dict | None = None, flushed: int = 0, message: str | None = None):
    path = fm.set_dir(root, flag_set, mode) / f"{capsule}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"capsule": {"name": capsule}, "status": status,
                                "message": message, "failure_reasons": reasons or {},
                                "observed": {"subnormals_flushed": flushed,
                                             "inputs_flushed": 0}}))
    return path


def scenario(root: Path) -> fm.Plan:
    for c in CAPSULES:
        write_record(root, "default", fm.OWN, c)
    flush = {"flushed-subnormal": 7}
    write_record(root, "ftz", fm.OWN, "native_cuda.exp", flushed=7)
    write_record(root, "ftz", fm.DEFAULT_POLICY, "native_cuda.exp", "failed", flush)
    write_record(root, "ftz", fm.OWN, "native_cuda.reshape")
    write_record(root, "ftz", fm.DEFAULT_POLICY, "native_cuda.reshape")
    write_record(root, "ftz", fm.OWN, "native_cuda.reduce_sum")
    write_record(root, "ftz", fm.DEFAULT_POLICY, "native_cuda.reduce_sum")
    write_record(root, "ftz", fm.OWN, "native_cuda.add", flushed=3)
    write_record(root, "ftz", fm.DEFAULT_POLICY, "native_cuda.add", "failed", {**flush})
    write_record(root, "fast-math", fm.OWN, "native_cuda.exp", flushed=9)
    write_record(root, "fast-math", fm.DEFAULT_POLICY, "native_cuda.exp", "failed",
                 {"flushed-subnormal": 9, "exceeds-bound": 40})
    write_record(root, "fast-math", fm.OWN, "native_cuda.reshape")
    write_record(root, "fast-math", fm.DEFAULT_POLICY, "native_cuda.reshape")
    write_record(root, "fast-math", fm.OWN, "native_cuda.reduce_sum")
    write_record(root, "fast-math", fm.DEFAULT_POLICY, "native_cuda.reduce_sum")
    write_record(root, "fast-math", fm.OWN, "native_cuda.add", flushed=2)
    write_record(root, "fast-math", fm.DEFAULT_POLICY, "native_cuda.add")   # not as expected
    return fm.Plan(SETS, CAPSULES, {"quick": True, "cases": None, "seed": "0",
                                    "exhaustive": False, "stride": None})


if __name__ == "__main__":
    # Rewrites fixtures/evidence/flags/flag-matrix.json, the report page's gold input:
    # `PYTHONPATH=. python tests/flag_records.py` from the repository root, after an intended
    # change.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        matrix = fm.assemble(Path(tmp), scenario(Path(tmp)))
    out = Path(__file__).resolve().parent.parent / "fixtures/evidence/flags/flag-matrix.json"
    out.write_text(json.dumps(matrix, indent=1) + "\n")
    print(f"wrote {out}")
