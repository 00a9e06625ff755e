#!/usr/bin/env bash
# Stop the Grid Engine cell tests/cluster/sge.sh started: its jobs, sge_execd, sge_qmaster.
# The unpacked binaries and the cell stay (the next sge.sh starts in a few seconds); with
# --purge also /var/tmp/pwe-sge, tests/cluster/sge.env and the two library links sge.sh made
# in /usr/lib/gridengine. Prints one line: `sge: down (...)` or `sge: FAILED: <reason>`.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${PWE_SGE_DIR:-/var/tmp/pwe-sge}
ENV_FILE=${PWE_SGE_ENV:-$HERE/sge.env}
export SGE_ROOT=$BASE/root SGE_CELL=default SGE_QMASTER_PORT=${PWE_SGE_QMASTER_PORT:-6444} \
       SGE_EXECD_PORT=${PWE_SGE_EXECD_PORT:-6445}
BIN=$SGE_ROOT/bin/lx-amd64

[ "$(id -u)" = 0 ] || { echo "sge: FAILED: must run as root"; exit 1; }
[ -d "$BASE" ] || { echo "sge: down (nothing at $BASE)"; exit 0; }
exec 8>"$BASE/lock"
flock -w 600 8 || { echo "sge: FAILED: another sge script holds $BASE/lock"; exit 1; }

. "$HERE/../services/pidfile.sh"   # alive PIDFILE COMM
pid_of() { alive "$1" "$2" && cat "$1"; }  # pid_of PIDFILE COMM: the pid when alive says it is COMM

stop() {  # stop PID: TERM (the daemons shut down cleanly on it), KILL after 20 s
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do [ -d "/proc/$pid" ] || return 0; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
}

stopped=()
if [ -x "$BIN/qdel" ] && pid_of "$BASE/spool/qmaster/qmaster.pid" sge_qmaster >/dev/null; then
    "$BIN/qdel" -u '*' >/dev/null 2>&1  # (the tests' jobs; none may outlive the cell)
fi
for f in "$BASE"/spool/execd/*/execd.pid; do
    pid=$(pid_of "$f" sge_execd) && { stop "$pid"; stopped+=(execd); }
done
pid=$(pid_of "$BASE/spool/qmaster/qmaster.pid" sge_qmaster) && { stop "$pid"; stopped+=(qmaster); }

if [ "${1:-}" = --purge ]; then
    for l in libspoolc.so libspoolb.so; do
        case "$(readlink "/usr/lib/gridengine/$l")" in "$SGE_ROOT"/*) rm -f "/usr/lib/gridengine/$l" ;; esac
    done
    rmdir /usr/lib/gridengine 2>/dev/null
    rm -rf "$BASE" "$ENV_FILE"
    stopped+=(purged)
fi
what=${stopped[*]:-nothing running}
echo "sge: down (${what// /, })"
