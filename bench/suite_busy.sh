#!/usr/bin/env bash
# The whole test suite with the machine busy: HOGS busy loops (default 2, one a core of
# a 2-core machine) spin beside `bash tests/run.sh` for as long as it runs, as a CI machine
# shared with other work is busy. Not part of the suite: a check that the suite waits on
# conditions, not on time (issue 31 item 9).
#   bash bench/suite_busy.sh [pytest args]        HOGS=N to change the number of loops
set -uo pipefail
cd "$(dirname "$0")/.."
hogs=()
for _ in $(seq "${HOGS:-2}"); do
    python3 -c 'while True: pass' &
    hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
start=$(date +%s)
bash tests/run.sh "$@"
rc=$?
echo "suite_busy: exit $rc in $(( $(date +%s) - start )) s with ${HOGS:-2} CPU hogs"
exit $rc
