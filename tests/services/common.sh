# Shared by setup.sh, teardown.sh and node.sh: names, paths, and the steps that start
# each service. Sourced, never run. Every function is idempotent.
#
# Layout (all on the one shared filesystem, like a cluster's):
#   /etc/slurm/slurm.conf        the one-node cluster (where the Debian commands look)
#   /var/tmp/pwe-slurm/          its state, spool, pid and log files
#   /var/tmp/pwe-ssh/            client key (id_ed25519), host keys, sshd configs, pid
#                                files and logs, known_hosts, ssh_config
#   network: bridge pwe-br0 (10.233.0.1/16, and 10.233.N.1) in the root namespace;
#            node N = namespace pwe-nN, veth pwe-vN <-> eth0 (10.233.N.2/16) on the bridge,
#            its own UTS namespace (hostname pwe-nN) and its own sshd on 10.233.N.2:22.

PWE_NODES=4
PWE_SLURM_DIR=/var/tmp/pwe-slurm
PWE_SSH_DIR=/var/tmp/pwe-ssh
PWE_LOCK=/var/tmp/pwe-services.lock
PWE_BRIDGE=pwe-br0
PWE_HEAD_ADDR=10.233.0.1
PWE_LOCAL_PORT=2222
SLURM_CONF=/etc/slurm/slurm.conf
# The first line of every slurm.conf these scripts write: a slurm.conf without it is not
# ours, and is replaced only when told (may_write_slurm_conf).
SLURM_CONF_MARKER="# One-node SLURM cluster for pwe's tests (written by tests/services/setup.sh)."
PWE_ETC_HOSTS=${PWE_ETC_HOSTS:-/etc/hosts}   # (another file only for the tests of these steps)
PWE_REDIS_DIR=/var/tmp/pwe-redis   # redis.conf, pid, log, and password + url (owner-only)
PWE_REDIS_PORT=6391                 # not 6379: a machine's own Redis is left alone
PWE_PACKAGES=(slurm-wlm munge openssh-server openssh-client slurm-wlm-torque iproute2 procps openmpi-bin
              redis-server chromium chromium-driver
              # members in containers and modules (issue 49): ch-run, a static busybox for the
              # tests' directory image, Lmod; podman with runc (crun cannot start containers
              # under these machines' hybrid cgroups: tests/conftest.py's podman fixture)
              charliecloud busybox-static lmod podman runc)

export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

node_ns() { echo "pwe-n$1"; }
node_addr() { echo "10.233.$1.2"; }
node_veth() { echo "pwe-v$1"; }
# ns_exists NS: network namespace NS is made (`ip netns add` names it in /run/netns)
ns_exists() { [ -e "/run/netns/$1" ]; }

say() { printf '%s\n' "$*"; }
warn() { printf '%s\n' "$*" >&2; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        warn "$(basename "$0"): must run as root (it installs packages, starts daemons, makes network namespaces)"
        exit 1
    fi
}

take_lock() {  # serialize setup/teardown/node.sh between concurrent test sessions
    exec 9>"$PWE_LOCK"
    if ! flock -w "${1:-300}" 9; then
        warn "$(basename "$0"): another test-services script holds $PWE_LOCK"
        exit 1
    fi
}

. "$(dirname "${BASH_SOURCE[0]}")/pidfile.sh"   # alive, stop_pidfile

tail_log() {  # tail_log FILE [N]: indented last lines of a log, for failure messages
    [ -f "$1" ] && { echo "  --- last lines of $1:"; tail -n "${2:-15}" "$1" | sed 's/^/  | /'; }
}

# ---------------------------------------------------------------- packages

# A package is present when dpkg says it is installed. Asked of dpkg-query alone, not piped
# to `grep -q`: grep leaves at the first match, dpkg -s of a long entry (podman's is 6.7 KB)
# then dies of SIGPIPE, and under pipefail a present package read as missing about half the time.
# missing_packages [NAME...]: those of NAMEs (none given: PWE_PACKAGES) not installed.
missing_packages() {
    local p names=("$@")
    [ $# -gt 0 ] || names=("${PWE_PACKAGES[@]}")
    for p in "${names[@]}"; do
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || printf '%s ' "$p"
    done
}

install_packages() {
    local missing log=/var/tmp/pwe-services-apt.log t0 rc made_policy=0
    missing=$(missing_packages)
    if [ -z "$missing" ]; then say "packages: present"; return 0; fi
    t0=$SECONDS
    # Keep the packages' own init scripts from starting system daemons (we start ours).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
    fi
    {
        apt-get update -q &&
        apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef \
            -o Dpkg::Options::=--force-confold "${PWE_PACKAGES[@]}"
    } >"$log" 2>&1
    rc=$?
    [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
    missing=$(missing_packages)
    if [ "$rc" != 0 ] || [ -n "$missing" ]; then
        say "packages: FAILED: apt-get exited $rc; still missing: ${missing:-none}"
        tail_log "$log" 25
        return 1
    fi
    say "packages: installed ${PWE_PACKAGES[*]} in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- redis

# A real Redis on 127.0.0.1:$PWE_REDIS_PORT with a password (requirepass), for the message
# bus and the service. The password is made once, kept in $PWE_REDIS_DIR/password and the
# whole URL in $PWE_REDIS_DIR/url (redis://default:PASSWORD@127.0.0.1:PORT/0), both mode 600.
redis_url() { cat "$PWE_REDIS_DIR/url"; }
redis_ok() { redis-cli -u "$(redis_url)" --no-auth-warning ping 2>/dev/null | grep PONG >/dev/null; }

start_redis() {
    local i pass
    mkdir -p "$PWE_REDIS_DIR" && chmod 700 "$PWE_REDIS_DIR" || return 1
    if [ ! -s "$PWE_REDIS_DIR/password" ]; then
        (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$PWE_REDIS_DIR/password")
    fi
    pass=$(cat "$PWE_REDIS_DIR/password")
    (umask 077; printf 'redis://default:%s@127.0.0.1:%s/0\n' "$pass" "$PWE_REDIS_PORT" >"$PWE_REDIS_DIR/url")
    if alive "$PWE_REDIS_DIR/redis.pid" redis-server && redis_ok; then
        say "redis: up (127.0.0.1:$PWE_REDIS_PORT, password in $PWE_REDIS_DIR/password, url in $PWE_REDIS_DIR/url)"
        return 0
    fi
    stop_pidfile "$PWE_REDIS_DIR/redis.pid" redis-server
    (umask 077; cat >"$PWE_REDIS_DIR/redis.conf" <<CONF
bind 127.0.0.1
port $PWE_REDIS_PORT
protected-mode yes
requirepass $pass
daemonize yes
pidfile $PWE_REDIS_DIR/redis.pid
logfile $PWE_REDIS_DIR/redis.log
dir $PWE_REDIS_DIR
save ""
appendonly no
CONF
)
    redis-server "$PWE_REDIS_DIR/redis.conf" >/dev/null 2>&1 3>&- 9>&-  # (neither the services lock nor a caller's flock on fd 3)
    for i in $(seq 50); do redis_ok && break; sleep 0.1; done
    if redis_ok; then
        say "redis: up (127.0.0.1:$PWE_REDIS_PORT, password in $PWE_REDIS_DIR/password, url in $PWE_REDIS_DIR/url)"
        return 0
    fi
    say "redis: FAILED: no PONG from 127.0.0.1:$PWE_REDIS_PORT"
    tail_log "$PWE_REDIS_DIR/redis.log"
    return 1
}

# ---------------------------------------------------------------- munge

munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    local i
    if munge_ok; then say "munge: up"; return 0; fi
    stop_pidfile /run/munge/munged.pid munged
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 0755 /run/munge
    chmod 0700 /etc/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key >/dev/null 2>&1 ||
            { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null &&
              chown munge:munge /etc/munge/munge.key; }
        chmod 0400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged >/var/tmp/pwe-munged.out 2>&1 3>&- 9>&- ||
        runuser -u munge -- /usr/sbin/munged --force >>/var/tmp/pwe-munged.out 2>&1 3>&- 9>&-
    for i in $(seq 50); do munge_ok && { say "munge: up"; return 0; }; sleep 0.1; done
    say "munge: FAILED: munged did not answer (munge -n | unmunge)"
    sed 's/^/  | /' /var/tmp/pwe-munged.out 2>/dev/null
    tail_log /var/log/munge/munged.log
    return 1
}

# ---------------------------------------------------------------- slurm

# What every test cluster's slurm.conf says (this one-node cluster's and the four-node
# one's of tests/cluster/common.sh): daemons as root, munge, no accounting, cores (and,
# given CR_Core_Memory, memory) as what jobs are given.
slurm_conf_common() {
    cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=${1:-CR_Core}
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=300
# a job over its partition's limits is refused at submission (not left pending forever)
EnforcePartLimits=ALL
MailProg=/bin/true
EOF
}

slurm_conf_text() {
    cat <<EOF
$SLURM_CONF_MARKER
ClusterName=pwe
SlurmctldHost=localhost
$(slurm_conf_common CR_Core)
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$PWE_SLURM_DIR/state
SlurmdSpoolDir=$PWE_SLURM_DIR/spool
SlurmctldPidFile=$PWE_SLURM_DIR/run/slurmctld.pid
SlurmdPidFile=$PWE_SLURM_DIR/run/slurmd.pid
SlurmctldLogFile=$PWE_SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$PWE_SLURM_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# two stand-in GPUs and a partition "gpu", so tests see GPU pilots land where GPUs are.
# SLURM 22.05 drops a GPU without a device file ("Removing file-less GPU"), so each is a
# character device made like /dev/null (gres_conf_text); SLURM then sets
# CUDA_VISIBLE_DEVICES=0,1 in a job that asks for both, as on a real GPU node
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=localhost MaxTime=10 State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
EOF
}

SLURM_GRES_CONF=/etc/slurm/gres.conf
PWE_GPU_DEVS=$PWE_SLURM_DIR/dev
gres_conf_text() {
    cat <<EOF
$SLURM_CONF_MARKER
NodeName=localhost Name=gpu File=$PWE_GPU_DEVS/gpu[0-1]
EOF
}

make_gpu_devs() {  # the stand-in GPUs' device files: character devices 1,3 (what /dev/null is)
    local i
    mkdir -p "$PWE_GPU_DEVS"
    for i in 0 1; do
        [ -c "$PWE_GPU_DEVS/gpu$i" ] || { rm -f "$PWE_GPU_DEVS/gpu$i"; mknod -m 666 "$PWE_GPU_DEVS/gpu$i" c 1 3; } || return 1
    done
}

# may_write_slurm_conf [CONF]: whether setup.sh may write CONF. Yes when there is none or
# it is ours (its first line is SLURM_CONF_MARKER). Someone else's slurm.conf (a real
# cluster's) is replaced only when CI or PWE_TEST_OVERWRITE_SLURM=1 is set, and kept as
# CONF.before-pwe; otherwise this says in one line what to set and returns 1, and setup.sh
# starts neither munge nor SLURM (the tests that need them are skipped).
may_write_slurm_conf() {
    local conf=${1:-$SLURM_CONF} first=
    [ -e "$conf" ] || return 0
    IFS= read -r first <"$conf"
    [ "$first" = "$SLURM_CONF_MARKER" ] && return 0
    if [ -n "${CI:-}" ] || [ "${PWE_TEST_OVERWRITE_SLURM:-}" = 1 ]; then
        [ -e "$conf.before-pwe" ] || cp -p "$conf" "$conf.before-pwe" || return 1
        warn "setup.sh: replacing $conf, which the test services did not write (CI or PWE_TEST_OVERWRITE_SLURM is set); the old one is $conf.before-pwe"
        return 0
    fi
    say "slurm: not started: $conf was not written by pwe's test services; set PWE_TEST_OVERWRITE_SLURM=1 to let tests/services/setup.sh replace it (keeping it as $conf.before-pwe), else the SLURM and PBS tests are skipped"
    return 1
}

slurm_node_state() { sinfo -h -N -n localhost -o %t 2>/dev/null | head -n1; }

start_slurm() {  # (setup.sh asks may_write_slurm_conf first)
    local changed=0 state i t0=$SECONDS cpus
    mkdir -p /etc/slurm "$PWE_SLURM_DIR"/{state,spool,run,log}
    if ! cmp -s <(slurm_conf_text) "$SLURM_CONF"; then
        slurm_conf_text >"$SLURM_CONF.pwe-new" && mv "$SLURM_CONF.pwe-new" "$SLURM_CONF"
        changed=1
    fi
    make_gpu_devs || { say "slurm: FAILED: cannot make the stand-in GPU devices in $PWE_GPU_DEVS"; return 1; }
    if ! cmp -s <(gres_conf_text) "$SLURM_GRES_CONF"; then
        gres_conf_text >"$SLURM_GRES_CONF.pwe-new" && mv "$SLURM_GRES_CONF.pwe-new" "$SLURM_GRES_CONF"
        changed=1
    fi
    if [ "$changed" = 1 ] && [ "$(sinfo -h -N -n localhost -o %G 2>/dev/null | head -n1)" != "gpu:2" ]; then
        # slurmd loads its GRES plugins only when it starts ("GresPlugins changed ... ignored"
        # on a reconfigure, and the node goes INVAL): restart both daemons (jobs go on)
        stop_pidfile "$PWE_SLURM_DIR/run/slurmd.pid" slurmd
        stop_pidfile "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld
    fi
    if [ "$changed" = 1 ] && alive "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld; then
        # a running cluster with another configuration: reread it (jobs go on); restart
        # the daemons only if that fails or the node did not take its new definition
        if ! scontrol reconfigure >/dev/null 2>&1 || ! sleep 2 ||
            [ "$(sinfo -h -N -n localhost -o '%c %m %G' | head -n1 | tr -s ' ')" != "8 16000 gpu:2" ]; then
            stop_pidfile "$PWE_SLURM_DIR/run/slurmd.pid" slurmd
            stop_pidfile "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld
        fi
    fi
    if ! alive "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld; then
        if ! slurmctld >>"$PWE_SLURM_DIR/log/slurmctld.out" 2>&1 3>&- 9>&-; then
            say "slurm: FAILED: slurmctld did not start"
            tail_log "$PWE_SLURM_DIR/log/slurmctld.out"; tail_log "$PWE_SLURM_DIR/log/slurmctld.log"
            return 1
        fi
    fi
    if ! alive "$PWE_SLURM_DIR/run/slurmd.pid" slurmd; then
        if ! slurmd -N localhost >>"$PWE_SLURM_DIR/log/slurmd.out" 2>&1 3>&- 9>&-; then
            say "slurm: FAILED: slurmd did not start"
            tail_log "$PWE_SLURM_DIR/log/slurmd.out"; tail_log "$PWE_SLURM_DIR/log/slurmd.log"
            return 1
        fi
    fi
    for i in $(seq 120); do  # up to 60 s
        state=$(slurm_node_state)
        case "$state" in
            idle|mix|alloc|comp) break ;;
            down|drain|drng|fail|down\*|drain\*)
                # left down/drained by an earlier session (or a restart): give it back
                [ $((i % 6)) = 5 ] && scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 ;;
        esac
        sleep 0.5
    done
    case "$state" in
        idle|mix|alloc|comp) ;;
        *)
            say "slurm: FAILED: node localhost is '${state:-no answer}' after $((SECONDS - t0)) s (wanted idle)"
            sinfo 2>&1 | sed 's/^/  | /'
            tail_log "$PWE_SLURM_DIR/log/slurmctld.log"; tail_log "$PWE_SLURM_DIR/log/slurmd.log"
            return 1 ;;
    esac
    cpus=$(sinfo -h -N -n localhost -o %c | head -n1)
    say "slurm: up (localhost $state, $cpus CPUs; partitions debug (default, no time limit), short (10 min), gpu (2 count-only GPUs); conf $SLURM_CONF)"
    if command -v qsub >/dev/null && command -v qstat >/dev/null && command -v qdel >/dev/null; then
        say "pbs: up (qsub/qstat/qdel of slurm-wlm-torque over the same cluster)"
    else
        say "pbs: FAILED: qsub/qstat/qdel not found (package slurm-wlm-torque)"
        return 1
    fi
}

stop_slurm() {
    if alive "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld; then
        scontrol shutdown >/dev/null 2>&1
        for i in $(seq 50); do
            alive "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld || alive "$PWE_SLURM_DIR/run/slurmd.pid" slurmd || break
            sleep 0.2
        done
    fi
    stop_pidfile "$PWE_SLURM_DIR/run/slurmd.pid" slurmd
    stop_pidfile "$PWE_SLURM_DIR/run/slurmctld.pid" slurmctld
}

# ---------------------------------------------------------------- ssh

clear_stale_shell_locks() {
    # Every ssh session here runs root's login shell, whose ~/.bashrc runs `pyenv init`;
    # a shell killed mid-rehash (a node killed by a test, an interrupted run) leaves
    # pyenv's lock behind, and then every later login waits 60 s for it. A lock older
    # than a minute is stale.
    local lock="${HOME:-/root}/.pyenv/shims/.pyenv-shim"
    if [ -e "$lock" ] && [ -n "$(find "$lock" -mmin +1 2>/dev/null)" ]; then
        rm -f "$lock"
    fi
}

ssh_keys() {
    local name
    clear_stale_shell_locks
    mkdir -p "$PWE_SSH_DIR"/{hostkeys,sshd,run,log} && chmod 700 "$PWE_SSH_DIR"
    [ -s "$PWE_SSH_DIR/id_ed25519" ] ||
        ssh-keygen -q -t ed25519 -N '' -C pwe-tests -f "$PWE_SSH_DIR/id_ed25519" || return 1
    cp "$PWE_SSH_DIR/id_ed25519.pub" "$PWE_SSH_DIR/authorized_keys.new" &&
        mv "$PWE_SSH_DIR/authorized_keys.new" "$PWE_SSH_DIR/authorized_keys"
    chmod 600 "$PWE_SSH_DIR/authorized_keys"
    for name in pwe-local $(for n in $(seq "$PWE_NODES"); do node_ns "$n"; done); do
        [ -s "$PWE_SSH_DIR/hostkeys/${name}_ed25519_key" ] ||
            ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$PWE_SSH_DIR/hostkeys/${name}_ed25519_key" || return 1
    done
    mkdir -p /run/sshd && chmod 755 /run/sshd   # sshd's privilege separation directory
}

# sshd_conf NAME LISTEN: the sshd_config of one test sshd
sshd_conf() {
    cat <<EOF
# sshd of test node $1 (written by tests/services/setup.sh)
ListenAddress $2
HostKey $PWE_SSH_DIR/hostkeys/$1_ed25519_key
PidFile $PWE_SSH_DIR/run/$1.pid
AuthorizedKeysFile $PWE_SSH_DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
PermitRootLogin prohibit-password
UsePAM no
UseDNS no
# the keys live under /var/tmp (mode 1777), which StrictModes would refuse
StrictModes no
MaxStartups 200:30:400
MaxSessions 100
X11Forwarding no
PrintMotd no
PrintLastLog no
AcceptEnv LANG LC_* PWE_*
Subsystem sftp internal-sftp
EOF
}

# host_key_seen NAME HOST PORT: the sshd at HOST:PORT serves NAME's host key
host_key_seen() {
    local want got
    want=$(awk '{print $2}' "$PWE_SSH_DIR/hostkeys/$1_ed25519_key.pub")
    got=$(ssh-keyscan -T 2 -t ed25519 -p "$3" "$2" 2>/dev/null | awk '{print $3}')
    [ -n "$got" ] && [ "$got" = "$want" ]
}

wait_host_key() {  # wait_host_key NAME HOST PORT [TRIES of 0.2 s]
    local i
    for i in $(seq "${4:-50}"); do host_key_seen "$1" "$2" "$3" && return 0; sleep 0.2; done
    return 1
}

setup_bridge() {
    local n
    ip link show "$PWE_BRIDGE" >/dev/null 2>&1 || ip link add "$PWE_BRIDGE" type bridge || return 1
    ip addr replace "$PWE_HEAD_ADDR/16" dev "$PWE_BRIDGE" || return 1
    for n in $(seq "$PWE_NODES"); do ip addr replace "10.233.$n.1/16" dev "$PWE_BRIDGE" || return 1; done
    ip link set "$PWE_BRIDGE" up
}

# setup_node_net N: namespace, veth on the bridge, addresses, links up (no default route:
# a node reaches only 10.233.0.0/16, i.e. the head and the other nodes)
setup_node_net() {
    local ns veth addr
    ns=$(node_ns "$1"); veth=$(node_veth "$1"); addr=$(node_addr "$1")
    ns_exists "$ns" || ip netns add "$ns" || return 1
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip -n "$ns" link del eth0 >/dev/null 2>&1
        ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
    fi
    ip link set "$veth" master "$PWE_BRIDGE" || return 1
    ip link set "$veth" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr replace "$addr/16" dev eth0 || return 1
    ip -n "$ns" link set eth0 up
}

# start_node_sshd N: (re)start node N's sshd unless it is running there with the right key
start_node_sshd() {
    local ns addr conf pidf pid
    ns=$(node_ns "$1"); addr=$(node_addr "$1")
    conf="$PWE_SSH_DIR/sshd/$ns.conf"; pidf="$PWE_SSH_DIR/run/$ns.pid"
    sshd_conf "$ns" "$addr:22" >"$conf.new"
    if cmp -s "$conf.new" "$conf" && alive "$pidf" sshd &&
        [ "$(ip netns identify "$(cat "$pidf")" 2>/dev/null)" = "$ns" ] && host_key_seen "$ns" "$addr" 22; then
        rm -f "$conf.new"; return 0
    fi
    mv "$conf.new" "$conf"
    stop_pidfile "$pidf" sshd
    # its own UTS namespace too, so that `hostname` on the node says pwe-nN
    ip netns exec "$ns" unshare --uts -- sh -c \
        "hostname '$ns' && exec /usr/sbin/sshd -f '$conf' -E '$PWE_SSH_DIR/log/$ns.log'" >>"$PWE_SSH_DIR/log/$ns.out" 2>&1 3>&- 9>&- ||
        { echo "sshd of $ns did not start"; tail_log "$PWE_SSH_DIR/log/$ns.out"; tail_log "$PWE_SSH_DIR/log/$ns.log"; return 1; }
    wait_host_key "$ns" "$addr" 22 ||
        { echo "sshd of $ns does not answer on $addr:22"; tail_log "$PWE_SSH_DIR/log/$ns.log"; return 1; }
}

start_local_sshd() {
    local conf="$PWE_SSH_DIR/sshd/pwe-local.conf" pidf="$PWE_SSH_DIR/run/pwe-local.pid"
    sshd_conf pwe-local "127.0.0.1:$PWE_LOCAL_PORT" >"$conf.new"
    if cmp -s "$conf.new" "$conf" && alive "$pidf" sshd && host_key_seen pwe-local 127.0.0.1 "$PWE_LOCAL_PORT"; then
        rm -f "$conf.new"; return 0
    fi
    mv "$conf.new" "$conf"
    stop_pidfile "$pidf" sshd
    /usr/sbin/sshd -f "$conf" -E "$PWE_SSH_DIR/log/pwe-local.log" >>"$PWE_SSH_DIR/log/pwe-local.out" 2>&1 3>&- 9>&- ||
        { echo "sshd pwe-local did not start"; tail_log "$PWE_SSH_DIR/log/pwe-local.out"; tail_log "$PWE_SSH_DIR/log/pwe-local.log"; return 1; }
    wait_host_key pwe-local 127.0.0.1 "$PWE_LOCAL_PORT" ||
        { echo "sshd pwe-local does not answer on 127.0.0.1:$PWE_LOCAL_PORT"; tail_log "$PWE_SSH_DIR/log/pwe-local.log"; return 1; }
}

# known_hosts from what the daemons really serve (ssh-keyscan), checked against the keys
# we generated; ssh_config with one Host entry per node and pwe-local.
write_ssh_client_files() {
    local n ns addr line kh="$PWE_SSH_DIR/known_hosts" cfg="$PWE_SSH_DIR/ssh_config"
    : >"$kh.new"
    for n in $(seq "$PWE_NODES"); do
        ns=$(node_ns "$n"); addr=$(node_addr "$n")
        line=$(ssh-keyscan -T 3 -t ed25519 "$addr" 2>/dev/null | awk -v names="$addr,$ns" '{print names, $2, $3}')
        [ "$(echo "$line" | awk '{print $3}')" = "$(awk '{print $2}' "$PWE_SSH_DIR/hostkeys/${ns}_ed25519_key.pub")" ] ||
            { echo "ssh-keyscan of $addr did not return $ns's host key"; return 1; }
        echo "$line" >>"$kh.new"
    done
    line=$(ssh-keyscan -T 3 -t ed25519 -p "$PWE_LOCAL_PORT" 127.0.0.1 2>/dev/null |
        awk -v names="[127.0.0.1]:$PWE_LOCAL_PORT,[localhost]:$PWE_LOCAL_PORT,[pwe-local]:$PWE_LOCAL_PORT" '{print names, $2, $3}')
    [ "$(echo "$line" | awk '{print $3}')" = "$(awk '{print $2}' "$PWE_SSH_DIR/hostkeys/pwe-local_ed25519_key.pub")" ] ||
        { echo "ssh-keyscan of 127.0.0.1:$PWE_LOCAL_PORT did not return pwe-local's host key"; return 1; }
    echo "$line" >>"$kh.new"
    cmp -s "$kh.new" "$kh" && rm -f "$kh.new" || mv "$kh.new" "$kh"

    {
        echo "# Test hosts of pwe (written by tests/services/setup.sh). Use: ssh -F $cfg pwe-n1 CMD"
        for n in $(seq "$PWE_NODES"); do
            printf 'Host %s\n    HostName %s\n' "$(node_ns "$n")" "$(node_addr "$n")"
        done
        printf 'Host pwe-local\n    HostName 127.0.0.1\n    Port %s\n' "$PWE_LOCAL_PORT"
        cat <<EOF
Host pwe-*
    User root
    IdentityFile $PWE_SSH_DIR/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $kh
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 5
    ServerAliveInterval 5
    ServerAliveCountMax 2
EOF
    } >"$cfg.new"
    cmp -s "$cfg.new" "$cfg" && rm -f "$cfg.new" || mv "$cfg.new" "$cfg"
    chmod 644 "$kh" "$cfg"
}

# /etc/hosts names for the nodes and the head (so that a node can reach another by name):
# one block between two marker lines, added at the end; every other line is kept as it is
HOSTS_BEGIN="# >>> pwe test nodes (tests/services/setup.sh)"
HOSTS_END="# <<< pwe test nodes"
hosts_block() {
    echo "$HOSTS_BEGIN"
    echo "$PWE_HEAD_ADDR pwe-head"
    for n in $(seq "$PWE_NODES"); do echo "$(node_addr "$n") $(node_ns "$n")"; done
    echo "$HOSTS_END"
}
# /etc/hosts without our block (exact lines); fails rather than print a partial file
etc_hosts_without_block() {
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1; next} $0 == e {skip = 0; next} !skip' "$PWE_ETC_HOSTS"
}
# rewrite /etc/hosts in place (cat >, since it may be a bind mount), only with a sane text
replace_etc_hosts() {  # replace_etc_hosts TEXT
    local others
    others=$(grep -cv -e '^# >>> pwe' -e '^# <<< pwe' -e ' pwe-head$' -e ' pwe-n[0-9]*$' <<<"$1")
    [ "$others" -ge "$(grep -cv -e '^# >>> pwe' -e '^# <<< pwe' -e ' pwe-head$' -e ' pwe-n[0-9]*$' "$PWE_ETC_HOSTS")" ] ||
        { echo "refusing to rewrite $PWE_ETC_HOSTS: lines would be lost" >&2; return 1; }
    printf '%s\n' "$1" >"$PWE_ETC_HOSTS"
}
write_etc_hosts() {
    local kept want
    kept=$(etc_hosts_without_block) || return 1
    want=$(printf '%s\n' "$kept"; hosts_block)
    [ "$want" = "$(cat "$PWE_ETC_HOSTS")" ] && return 0
    replace_etc_hosts "$want"
}
remove_etc_hosts() {
    local kept
    kept=$(etc_hosts_without_block) || return 1
    [ "$kept" = "$(cat "$PWE_ETC_HOSTS")" ] || replace_etc_hosts "$kept"
}

# ssh_login NAME: a real login with the tests' identity
ssh_login() { ssh -F "$PWE_SSH_DIR/ssh_config" "$1" true </dev/null 2>&1; }

# kill_node_procs N: kill -9 every process in namespace pwe-nN until none is left
kill_node_procs() {
    local ns pids i
    ns=$(node_ns "$1")
    for i in $(seq 50); do
        pids=$(ip netns pids "$ns" 2>/dev/null | grep -vx "$$")
        [ -z "$pids" ] && return 0
        kill -9 $pids 2>/dev/null
        sleep 0.1
    done
    [ -z "$(ip netns pids "$ns" 2>/dev/null)" ]
}
