#!/usr/bin/env bash
# Run the test suite in parallel (pytest-xdist). Extra arguments go to pytest; `-p no:xdist`
# (or TORCHLEAN_TEST_WORKERS=0) runs it in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
workers=(-n "${TORCHLEAN_TEST_WORKERS:-auto}")
for arg in "$@"; do
    [ "$arg" = "no:xdist" ] && workers=()
done
[ "${TORCHLEAN_TEST_WORKERS:-auto}" = "0" ] && workers=()
exec "$PY" -m pytest "${workers[@]}" -q "$@"
