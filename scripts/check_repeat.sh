#!/usr/bin/env bash
# Run scripts/check.sh (with its arguments, e.g. --cuda) N times in a row and print one line per
# run: exit status, duration, test counts, stale capsules and earned trust. The first run starts
# from empty evidence; later runs resume it, so they show that evidence made in one process is
# fresh in the next. Logs go to $OUT (or /tmp)/check-<i>.log.
#   scripts/check_repeat.sh 3 --cuda
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:?usage: scripts/check_repeat.sh N [check.sh arguments]}"
shift
out="${OUT:-/tmp}"
mkdir -p "$out"
rm -rf reports/evidence
summary=()
worst=0
for i in $(seq 1 "$runs"); do
    t0=$(date +%s)
    bash scripts/check.sh "$@" > "$out/check-$i.log" 2>&1
    rc=$?
    [ "$rc" -gt "$worst" ] && worst=$rc
    secs=$(( $(date +%s) - t0 ))
    tests=$(grep -E '^[0-9]+ (passed|failed)' "$out/check-$i.log" | head -1)
    line=$(python3 - "$i" "$rc" "$secs" "$tests" <<'PY'
import json, sys
from pathlib import Path
i, rc, secs, tests = sys.argv[1:]
parts = [f"run {i}: rc={rc} {secs}s tests: {tests or '?'}"]
for trust in sorted(Path("reports/evidence").glob("*/trust.json")):
    doc = json.loads(trust.read_text())
    caps = doc["capsules"].values()
    stale = sum("stale" in (c.get("reason") or "") for c in caps)
    earned = {}
    for c in caps:
        earned[c["earned"] or "nothing"] = earned.get(c["earned"] or "nothing", 0) + 1
    parts.append(f"{doc['device']}: {len(caps)} capsules, {stale} stale, earned "
                 + ", ".join(f"{k} {v}" for k, v in sorted(earned.items())))
print("; ".join(parts))
PY
)
    resumed=$(grep -E "^[0-9]+ of [0-9]+ capsules resumed" "$out/check-$i.log" | paste -sd' ')
    summary+=("$line; ${resumed:-no resume line}")
    echo "${summary[-1]}"
done
echo
echo "== check.sh $* x $runs"
printf '%s\n' "${summary[@]}"
exit "$worst"
