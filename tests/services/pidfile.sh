# Which process a daemon's pid file names: sourced by tests/services/common.sh,
# tests/cluster/sge.sh and sge-down.sh, never run.
#
# A pid file outlives its daemon when the daemon is killed (kill -9, node.sh kill, a machine
# that stops without teardown.sh) and /var/tmp is kept. Its number is then handed to another
# process, and here that other process is often a daemon of the same name: the test machines
# start the same daemons in the same order after every start, so their pids repeat, and six
# slurmds and six sshds run at once. A check by name alone took pwe-n1's slurmd for pwe-n4's
# (CI of 2026-11-29: pwe-n4's stale file said 10329, and pwe-n1's slurmd had just started as
# 10329, forked its daemon 10330 and ended; pid 1 here reaps orphans seconds late, so 10329
# was a zombie named slurmd; pwe-n4 was never started and stayed "idle*"). So a zombie is not
# alive, and the process must be no younger than the file: a daemon writes its pid file after
# it starts, and a process that got the number later started after the file was written.
# (Its start is the kernel's boot time plus its start in clock ticks, whole seconds; 2 s of
# slack covers that rounding and no more.)

# alive PIDFILE COMM: the pid in PIDFILE is running, is a COMM, is not a zombie, and
# started no later than PIDFILE was written
alive() {
    local pid stat comm fields btime hz written
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    # one read for all three: "PID (COMM) STATE ...", starttime is field 22 of stat(5)
    comm=${stat#*(}
    [ "${comm%)*}" = "$2" ] || return 1
    read -ra fields <<<"${stat##*) }"
    [ "${fields[0]}" != Z ] || return 1
    btime=$(awk '$1 == "btime" {print $2}' /proc/stat)
    hz=$(getconf CLK_TCK)
    written=$(stat -c %Y "$1" 2>/dev/null) || return 1
    [ $((btime + fields[19] / hz)) -le $((written + 2)) ]
}

# stop_pidfile PIDFILE COMM: TERM then KILL the process PIDFILE names (only if alive says it
# is that daemon), and remove PIDFILE
stop_pidfile() {
    local pid i
    alive "$1" "$2" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null
    # (alive, not kill -0: a zombie has ended, and after it the pid may be another's)
    for i in $(seq 50); do alive "$1" "$2" || break; sleep 0.1; done
    alive "$1" "$2" && kill -9 "$pid" 2>/dev/null
    rm -f "$1"
}
