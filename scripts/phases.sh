# Phase timing for the CI scripts (sourced by scripts/test.sh and scripts/test-python.sh): `phase NAME`
# closes the previous phase and prints "== NAME" with the clock and the seconds since the script began;
# `phase_summary` (call it from the EXIT trap, so a failed run says where its time went too) prints each
# phase's seconds. `slowest_tests LOG` lists the slowest test binaries of a `cargo test` log by the
# "finished in" figure libtest prints for each binary (with the "Running" line that names it).
_phase_names=()
_phase_secs=()
_phase_open=""
_phase_t0=$SECONDS
_phase_close() {
    if [ -n "$_phase_open" ]; then
        _phase_names+=("$_phase_open")
        _phase_secs+=($((SECONDS - _phase_t0)))
        _phase_open=""
    fi
}
phase() {
    _phase_close
    _phase_open="$*"
    _phase_t0=$SECONDS
    echo "== $* [$(date -u +%H:%M:%S) UTC, +${SECONDS} s]"
}
phase_summary() {
    local label=${1:-phases} i
    _phase_close
    echo "== $label: seconds per phase (total ${SECONDS} s)"
    for i in "${!_phase_names[@]}"; do
        printf '%8d  %s\n' "${_phase_secs[$i]}" "${_phase_names[$i]}"
    done
}
slowest_tests() {
    [ -f "$1" ] || return 0
    echo "== slowest test binaries (seconds, libtest's figure)"
    awk '/^ *Running /{name=$2} /^test result:.*finished in/{t=$NF; sub(/s$/, "", t); printf "%8.1f  %s\n", t, name}' "$1" |
        sort -rn | head -n "${2:-25}"
}
