# Sourced by check.sh and gpu_suite.sh: each stage of a job timed, and a closing table of them
# (stage, wall seconds, status), so a slow job says where its time went.
#   stage NAME [--accept "0 1"] COMMAND...   runs COMMAND and returns its exit status; NAME, its
#       wall seconds and that status go to the table and to a line printed as it ends. A status the accepted list (default "0")
#       lacks sets stages_failed=1.
#   stage_table TITLE                         prints the table and the stages' total
#   stage_export / stage_import               the stages of a background subshell written to
#       stdout as lines, and read back into this shell's table (in their order)
#   beside FUNCTION ARGS...                   FUNCTION (which runs stages) in the background, its
#       output kept in a file; beside_join waits for every such function, prints each one's output
#       in the order they were started and adds their stages to the table; beside_stop ends each
#       such function and everything it started (the job was interrupted: a part run in the
#       background ignores the terminal's Ctrl-C, as bash makes it, so it must be stopped)
stage_names=()
stage_seconds=()
stage_statuses=()
stages_failed=0
stages_started=$(date +%s.%N)

_stage_now() { date +%s.%N; }

stage() {
    local name=$1 accept=0 start rc
    shift
    if [ "${1:-}" = "--accept" ]; then
        accept=$2
        shift 2
    fi
    start=$(_stage_now)
    "$@"
    rc=$?
    stage_names+=("$name")
    stage_seconds+=("$(awk -v a="$start" -v b="$(_stage_now)" 'BEGIN { printf "%.1f", b - a }')")
    if [[ " $accept " == *" $rc "* ]]; then
        if [ "$rc" = 0 ]; then stage_statuses+=("ok"); else stage_statuses+=("ok (exit $rc)"); fi
    else
        stage_statuses+=("FAILED (exit $rc)")
        stages_failed=1
    fi
    # a job stopped before its table still says where its time went
    echo "-- stage '$name': ${stage_seconds[-1]} s, ${stage_statuses[-1]}"
    return "$rc"
}

stage_table() {
    local i
    echo
    echo "== $1"
    printf '%-36s %9s  %s\n' stage seconds status
    for i in "${!stage_names[@]}"; do
        printf '%-36s %9s  %s\n' "${stage_names[$i]}" "${stage_seconds[$i]}" "${stage_statuses[$i]}"
    done
    printf '%-36s %9s\n' "sum of the stages" \
        "$(printf '%s\n' "${stage_seconds[@]}" | awk '{ s += $1 } END { printf "%.1f", s }')"
    # stages that ran side by side make the sum exceed the job's own clock
    printf '%-36s %9s\n' "wall clock" \
        "$(awk -v a="$stages_started" -v b="$(_stage_now)" 'BEGIN { printf "%.1f", b - a }')"
}

stage_export() {
    local i
    for i in "${!stage_names[@]}"; do
        printf '%s\t%s\t%s\n' "${stage_names[$i]}" "${stage_seconds[$i]}" "${stage_statuses[$i]}"
    done
}

stage_import() {
    local name seconds status
    while IFS=$'\t' read -r name seconds status; do
        stage_names+=("$name")
        stage_seconds+=("$seconds")
        stage_statuses+=("$status")
        [[ "$status" == FAILED* ]] && stages_failed=1
    done
    return 0
}

beside_pids=()
beside_logs=()
beside_tables=()

beside() {
    local log table
    log=$(mktemp)
    table=$(mktemp)
    ( stage_names=(); stage_seconds=(); stage_statuses=(); stages_failed=0
      "$@" > "$log" 2>&1
      stage_export > "$table" ) &
    beside_pids+=($!)
    beside_logs+=("$log")
    beside_tables+=("$table")
}

beside_join() {
    local i
    for i in "${!beside_pids[@]}"; do
        wait "${beside_pids[$i]}"
        cat "${beside_logs[$i]}"
        stage_import < "${beside_tables[$i]}"
        rm -f "${beside_logs[$i]}" "${beside_tables[$i]}"
    done
    beside_pids=()
    beside_logs=()
    beside_tables=()
}

_process_tree() {   # _process_tree PID: PID and its descendants, parents first
    local child
    echo "$1"
    for child in $(pgrep -P "$1" 2>/dev/null); do
        _process_tree "$child"
    done
}

beside_stop() {
    local pid pids=()
    for pid in "${beside_pids[@]}"; do
        # the whole tree at once: a parent killed alone would leave its children running
        pids+=($(_process_tree "$pid"))
    done
    [ "${#pids[@]}" -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
    wait 2>/dev/null
    return 0
}
