#!/usr/bin/env bash
# Run the test suite in parallel (pytest-xdist). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
exec "$PY" -m pytest -n "${TORCHLEAN_TEST_WORKERS:-auto}" -q "$@"
