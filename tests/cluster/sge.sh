#!/usr/bin/env bash
# A real Grid Engine cell (Debian's gridengine 8.1.9) for pwe's tests: one sge_qmaster and
# one sge_execd on this machine, queue all.q with 8 slots, parallel environment `pwe`
# ($fill_up, control_slaves TRUE, job_is_first_task FALSE) on it, min_uid/min_gid 0 (root
# jobs), and a scheduler that runs every second (jobs start in about a second, not 15 s).
#
# Why not `apt-get install gridengine-client`: Debian's slurm-wlm-torque (the PBS tests'
# qsub/qstat/qdel over SLURM) declares Conflicts: gridengine-client (both ship /usr/bin/qsub,
# qstat, qdel); installing one removes the other. So the gridengine .debs are fetched with
# `apt-get download` and unpacked (dpkg-deb -x) into a private SGE_ROOT in the layout SGE
# binaries expect ($SGE_ROOT/bin/lx-amd64, lib/lx-amd64: their RUNPATH), PBS's /usr/bin/q*
# stay Torque's, and an SGE host in hosts.yaml names commands_dir: $SGE_ROOT/bin/lx-amd64.
# One thing lands outside /var/tmp/pwe-sge: Debian built sge_qmaster and the spool tools to
# dlopen /usr/lib/gridengine/libspoolc.so (a fixed path), so that directory gets two links to
# the unpacked libraries (only when no gridengine package owns it; sge-down.sh removes them).
#
# Host name: the cell calls this machine by its own name (`hostname`), which /etc/hosts
# resolves to 127.0.0.1; host_aliases maps localhost to it too. (SGE's host_aliases only
# renames a host to a name that itself resolves, so a made-up name like "sgehead" would need
# an /etc/hosts line, which this script does not write; and with the alias in place the
# qmaster accepts the loopback name, so it needs no `unshare --uts`.)
#
# Idempotent: fetches and unpacks only what is missing, creates the cell once, starts only a
# daemon that is down, applies the configuration only when it changed. Prints one line,
# `sge: up (...)` or `sge: FAILED: <reason>` (then the daemons' last log lines), exits 1 on
# failure, and writes tests/cluster/sge.env (SGE_ROOT, SGE_CELL, ports, SGE_BIN: `. sge.env`
# then "$SGE_BIN/qsub"; PATH is left alone, where /usr/bin/qsub is Torque's).
# Stop everything it started: tests/cluster/sge-down.sh.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive

BASE=${PWE_SGE_DIR:-/var/tmp/pwe-sge}
ENV_FILE=${PWE_SGE_ENV:-$HERE/sge.env}
export SGE_ROOT=$BASE/root SGE_CELL=default SGE_QMASTER_PORT=${PWE_SGE_QMASTER_PORT:-6444} \
       SGE_EXECD_PORT=${PWE_SGE_EXECD_PORT:-6445}
ARCH=lx-amd64
BIN=$SGE_ROOT/bin/$ARCH
COMMON=$SGE_ROOT/$SGE_CELL/common
QSPOOL=$BASE/spool/qmaster
ESPOOL=$BASE/spool/execd
CONF=$BASE/conf
SLOTS=8
PE=pwe
QUEUE=all.q
PACKAGES=(gridengine-common gridengine-client gridengine-master gridengine-exec)
# what the unpacked binaries link against (the packages' Depends that are libraries)
LIBS=(libc6 libcrypt1 libdb5.3 libhwloc15 libjemalloc2 libmunge2 libpam0g libssl3 libtinfo6 libtirpc3)
NAME=$(hostname)

log_tails() {
    local f
    for f in "$QSPOOL/messages" "$ESPOOL"/*/messages "$BASE/log/qmaster.out" "$BASE/log/execd.out" \
             /tmp/qmaster_messages /tmp/execd_messages.*; do
        [ -s "$f" ] && { echo "--- last lines of $f"; tail -n 8 "$f"; }
    done
}
fail() { echo "sge: FAILED: $*"; log_tails; exit 1; }

[ "$(id -u)" = 0 ] || { echo "sge: FAILED: must run as root (it unpacks Grid Engine and starts its daemons)"; exit 1; }
mkdir -p "$BASE" || fail "cannot make $BASE"
exec 8>"$BASE/lock"
flock -w 600 8 || fail "another sge.sh holds $BASE/lock"

. "$HERE/../services/pidfile.sh"   # alive PIDFILE COMM

# -- the binaries --------------------------------------------------------------------------
unpack() {
    local debs=$BASE/debs tmp
    mkdir -p "$debs" && chmod 755 "$debs"
    if ! ls "$debs"/gridengine-exec_*.deb >/dev/null 2>&1; then
        (cd "$debs" && apt-get download "${PACKAGES[@]}" >"$BASE/apt-download.log" 2>&1) ||
            fail "apt-get download ${PACKAGES[*]}: $(tail -n 2 "$BASE/apt-download.log" | tr '\n' ' ')"
    fi
    tmp=$(mktemp -d "$BASE/unpack.XXXXXX")
    for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$tmp" || fail "dpkg-deb -x $d"; done
    rm -rf "$SGE_ROOT.new" && mkdir -p "$SGE_ROOT.new/bin/$ARCH" "$SGE_ROOT.new/lib/$ARCH"
    for f in "$tmp"/usr/lib/gridengine/*; do
        case ${f##*/} in
            db_*) ;;                                        # links to BerkeleyDB tools: not used
            *.so) cp -a "$f" "$SGE_ROOT.new/lib/$ARCH/" ;;
            *) cp -a "$f" "$SGE_ROOT.new/bin/$ARCH/" ;;
        esac
    done
    cp -a "$tmp/usr/share/gridengine/util" "$SGE_ROOT.new/util"
    cp -a "$tmp/usr/share/gridengine/default-configuration" "$SGE_ROOT.new/util/"
    rm -rf "$tmp"
    # keep a cell made earlier (its spool is elsewhere; common/ is under the root)
    [ -d "$SGE_ROOT/$SGE_CELL" ] && mv "$SGE_ROOT/$SGE_CELL" "$SGE_ROOT.new/"
    rm -rf "$SGE_ROOT" && mv "$SGE_ROOT.new" "$SGE_ROOT"
}
[ -x "$BIN/sge_qmaster" ] && [ -x "$BIN/sge_execd" ] && [ -x "$BIN/qsub" ] || unpack

missing_libs() { ldd "$BIN/sge_qmaster" "$BIN/sge_execd" "$BIN/qsub" "$BIN/spoolinit" 2>&1 | grep -c "not found"; }
if [ "$(missing_libs)" != 0 ]; then
    apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends "${LIBS[@]}" \
        >"$BASE/apt-install.log" 2>&1 || fail "apt-get install ${LIBS[*]}: $(tail -n 2 "$BASE/apt-install.log")"
    [ "$(missing_libs)" = 0 ] || fail "libraries still missing: $(ldd "$BIN/sge_qmaster" | grep 'not found')"
fi

if ! dpkg -S /usr/lib/gridengine >/dev/null 2>&1; then  # (no package owns it: ours to link)
    mkdir -p /usr/lib/gridengine
    for l in libspoolc.so libspoolb.so; do
        [ "$(readlink /usr/lib/gridengine/$l)" = "$SGE_ROOT/lib/$ARCH/$l" ] ||
            ln -sfn "$SGE_ROOT/lib/$ARCH/$l" "/usr/lib/gridengine/$l" || fail "cannot link /usr/lib/gridengine/$l"
    done
fi

# -- the cell ------------------------------------------------------------------------------
getent hosts "$NAME" >/dev/null || fail "this machine's name $NAME does not resolve (/etc/hosts)"
mkdir -p "$COMMON" "$QSPOOL/job_scripts" "$ESPOOL" "$CONF" "$BASE/log"
echo "$NAME localhost" >"$COMMON/host_aliases"
echo "$NAME" >"$COMMON/act_qmaster"
# the global configuration: Debian's, with root jobs allowed, no mail, accounting flushed at once
global_conf() {
    sed -e "s|^execd_spool_dir .*|execd_spool_dir        $ESPOOL|" -e "s|^min_uid .*|min_uid                0|" \
        -e "s|^min_gid .*|min_gid                0|" -e "s|^mailer .*|mailer                 /bin/true|" \
        -e "/^conf_version/d" -e "/^#/d" \
        -e "s|^reporting_params .*|reporting_params       accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00|" \
        "$SGE_ROOT/util/default-configuration" >"$CONF/global"
}
if [ ! -s "$COMMON/bootstrap" ] || [ ! -d "$QSPOOL/exec_hosts" ]; then
    cat >"$COMMON/bootstrap" <<EOF
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         $COMMON;$QSPOOL
binary_path             $SGE_ROOT/bin
qmaster_spool_dir       $QSPOOL
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
EOF
    global_conf
    {
        "$BIN/spoolinit" classic libspoolc "$COMMON;$QSPOOL" init &&
        "$BIN/spooldefaults.bin" configuration "$CONF/global" &&
        "$BIN/spooldefaults.bin" complexes "$SGE_ROOT/util/resources/centry" &&
        "$BIN/spooldefaults.bin" usersets "$SGE_ROOT/util/resources/usersets" &&
        "$BIN/spooldefaults.bin" managers root
    } >"$BASE/log/init.out" 2>&1 || { rm -f "$COMMON/bootstrap"; fail "cell creation: $(tail -n 3 "$BASE/log/init.out")"; }
    rm -f "$CONF/applied"
fi

q() { "$BIN/$1" "${@:2}"; }

answers() { q qstat -u '*' >/dev/null 2>&1; }

# -- sge_qmaster -----------------------------------------------------------------------------
started=()
if ! alive "$QSPOOL/qmaster.pid" sge_qmaster; then
    (cd / && setsid "$BIN/sge_qmaster" </dev/null >>"$BASE/log/qmaster.out" 2>&1) || fail "sge_qmaster did not start"
    started+=(qmaster)
fi
for _ in $(seq 150); do answers && break; sleep 0.2; done
answers || fail "sge_qmaster does not answer qstat: $(q qstat 2>&1 | tail -n 1)"

# -- configuration (applied when it changed) --------------------------------------------------
cat >"$CONF/sched" <<'EOF'
algorithm                         default
schedule_interval                 0:0:1
maxujobs                          0
queue_sort_method                 load
job_load_adjustments              NONE
load_adjustment_decay_time        0:0:0
load_formula                      slots
schedd_job_info                   false
flush_submit_sec                  1
flush_finish_sec                  1
params                            none
reprioritize_interval             0:0:0
halftime                          168
usage_weight_list                 cpu=1.000000,mem=0.000000,io=0.000000
compensation_factor               5.000000
weight_user                       0.250000
weight_project                    0.250000
weight_department                 0.250000
weight_job                        0.250000
weight_tickets_functional         0
weight_tickets_share              0
share_override_tickets            TRUE
share_functional_shares           TRUE
max_functional_jobs_to_schedule   200
report_pjob_tickets               TRUE
max_pending_tasks_per_job         50
halflife_decay_list               none
policy_hierarchy                  OFS
weight_ticket                     0.500000
weight_waiting_time               0.278000
weight_deadline                   3600000.000000
weight_urgency                    0.500000
weight_priority                   0.000000
max_reservation                   0
default_duration                  INFINITY
EOF
cat >"$CONF/exechost" <<EOF
hostname              $NAME
load_scaling          NONE
complex_values        NONE
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
EOF
cat >"$CONF/pe" <<EOF
pe_name            $PE
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    \$fill_up
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
cat >"$CONF/queue" <<EOF
qname                 $QUEUE
hostlist              $NAME
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               make $PE
rerun                 FALSE
slots                 $SLOTS
tmpdir                /tmp
shell                 /bin/bash
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
EOF
cat >"$CONF/make" <<'EOF'
pe_name            make
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $round_robin
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary TRUE
qsort_args         NONE
EOF
global_conf
wanted=$(cat "$CONF/global" "$CONF/sched" "$CONF/exechost" "$CONF/pe" "$CONF/make" "$CONF/queue" | md5sum | cut -d' ' -f1)
if [ "$(cat "$CONF/applied" 2>/dev/null)" != "$wanted" ]; then
    {
        # admin/submit host, exec host, the two PEs, then the queue that names them
        q qconf -ah "$NAME"; q qconf -as "$NAME"; q qconf -Mconf "$CONF/global"
        if q qconf -se "$NAME" >/dev/null 2>&1; then q qconf -Me "$CONF/exechost"; else q qconf -Ae "$CONF/exechost"; fi
        q qconf -Msconf "$CONF/sched"
        for p in pe make; do
            if q qconf -sp "$(sed -n 's/^pe_name *//p' "$CONF/$p")" >/dev/null 2>&1; then q qconf -Mp "$CONF/$p"
            else q qconf -Ap "$CONF/$p"; fi
        done
        if q qconf -sq "$QUEUE" >/dev/null 2>&1; then q qconf -Mq "$CONF/queue"; else q qconf -Aq "$CONF/queue"; fi
    } >"$BASE/log/config.out" 2>&1
    q qconf -sp "$PE" >/dev/null 2>&1 && q qconf -sq "$QUEUE" 2>/dev/null | grep "^pe_list .*$PE" >/dev/null ||
        fail "configuration: $(tail -n 3 "$BASE/log/config.out" | tr '\n' ' ')"
    echo "$wanted" >"$CONF/applied"
fi

# -- sge_execd -------------------------------------------------------------------------------
execd_up() {  # (its spool directory is named as it resolves itself: localhost here)
    local f
    for f in "$ESPOOL"/*/execd.pid; do alive "$f" sge_execd && return 0; done
    return 1
}
if ! execd_up; then
    (cd / && setsid "$BIN/sge_execd" </dev/null >>"$BASE/log/execd.out" 2>&1) || fail "sge_execd did not start"
    started+=(execd)
fi
# up when the queue instance takes jobs: its state has no a(larm), u(nknown), d(isabled), E(rror)
qstate() { q qstat -f -q "$QUEUE@$NAME" 2>/dev/null | awk -v qi="$QUEUE@$NAME" '$1 == qi {print ($6 == "" ? "ok" : $6)}'; }
for _ in $(seq 150); do [ "$(qstate)" = ok ] && break; sleep 0.2; done
state=$(qstate)
if [ "$state" != ok ]; then
    case "$state" in *E*) q qmod -c "$QUEUE@$NAME" >/dev/null 2>&1; sleep 1; state=$(qstate) ;; esac
    [ "$state" = ok ] || fail "queue instance $QUEUE@$NAME is '${state:-not listed}' (sge_execd not reporting?)"
fi

cat >"$ENV_FILE.tmp" <<EOF
# Grid Engine cell of pwe's tests (written by tests/cluster/sge.sh). Its commands are in
# \$SGE_BIN, not on PATH: /usr/bin/qsub is slurm-wlm-torque's (PBS over SLURM).
export SGE_ROOT=$SGE_ROOT
export SGE_CELL=$SGE_CELL
export SGE_QMASTER_PORT=$SGE_QMASTER_PORT
export SGE_EXECD_PORT=$SGE_EXECD_PORT
export SGE_BIN=$BIN
export SGE_HOST=$NAME
export SGE_PE=$PE
export SGE_QUEUE=$QUEUE
export SGE_SLOTS=$SLOTS
EOF
mv "$ENV_FILE.tmp" "$ENV_FILE"
what=${started[*]:-nothing}
echo "sge: up (cell $SGE_CELL at $SGE_ROOT, qmaster $NAME:$SGE_QMASTER_PORT, execd $NAME, queue $QUEUE $SLOTS slots," \
     "PE $PE; started: ${what// /, }; env: $ENV_FILE)"
