#!/usr/bin/env bash
# Smoke test of the installed package, not the source tree: run from an empty directory with the
# interpreter given as $1 (a venv the wheel was installed into), so only what the wheel ships is
# importable: the kernel sources, the report templates and the evidence schema included.
set -euo pipefail
py="${1:?usage: scripts/installed_smoke.sh PYTHON}"
work=$(mktemp -d)
cd "$work"
"$py" - <<'PY'
import importlib.resources as res
import engine, conformance, reports
assert "site-packages" in engine.__file__, f"engine imported from {engine.__file__}"
cu = sorted(p.name for p in (res.files("engine") / "csrc" / "cuda").iterdir())
assert "elementwise.cu" in cu and "tape.cu" in cu and "tl_common.cuh" in cu, cu
assert (res.files("conformance") / "evidence_schema.json").is_file()
assert (res.files("reports") / "templates" / "index.html").is_file()
print("installed package data: ok", len(cu), "kernel sources")
PY
"$py" -m engine.cli quickstart_mlp --steps 3 | tail -1
"$py" -m conformance.cli run --quick --suite campaign --capsule reference.add --no-progress \
    --evidence-dir ev | tail -2
"$py" -m reports report --evidence-dir ev --out out
test -f out/index.html
# the same command through torchlean-conformance, which runs it in a child process
"$py" -m conformance.cli report --evidence-dir ev --out out2 | tail -1
test -f out2/index.html
echo "installed smoke: ok"
