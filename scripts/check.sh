#!/usr/bin/env bash
# The maintained checks: the tests, then the conformance campaign and its report.
#   scripts/check.sh          on any machine (the CPU reference path)
#   scripts/check.sh --cuda   on a GPU machine: demands a native CUDA runtime, and fails with the
#                             runtime's own message when there is none
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=0
for arg in "$@"; do
    case "$arg" in
        --cuda) cuda=1 ;;
        *) echo "check.sh: unknown argument '$arg'; expected --cuda or nothing" >&2; exit 2 ;;
    esac
done
source scripts/python_env.sh

if [ "$cuda" = 1 ]; then
    "$PY" - <<'PY' || exit 1
import sys
from engine.errors import NativeRuntimeUnavailable
from engine.runtime.native import probe, require_native_runtime
try:
    require_native_runtime()
except NativeRuntimeUnavailable as exc:
    print(f"check.sh --cuda: {exc}", file=sys.stderr)
    sys.exit(1)
print(f"native CUDA runtime: {probe()[1]}")
PY
fi

echo "== tests"
"$PY" -m pytest -n "${TORCHLEAN_TEST_WORKERS:-auto}" -q

devices=cpu
[ "$cuda" = 1 ] && devices="cpu cuda"
if "$PY" -c "import conformance.cli" 2>/dev/null; then
    for device in $devices; do
        echo "== conformance campaign on $device"
        "$PY" -m conformance.cli run --device "$device" ${TORCHLEAN_CHECK_CAMPAIGN_ARGS:---quick}
    done
fi
if [ "$cuda" = 1 ] && [ -f scripts/gpu_suite.sh ]; then
    echo "== GPU suite"
    bash scripts/gpu_suite.sh
fi
