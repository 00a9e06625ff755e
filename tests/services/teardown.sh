#!/usr/bin/env bash
# Stop what setup.sh started: the test sshds, the node namespaces and their bridge,
# slurmd, slurmctld and munged, and the node names in /etc/hosts. For manual use (the
# tests never call it). Keeps the packages, the keys and /var/tmp/pwe-slurm's state.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

need_root
take_lock 600

for n in $(seq "$PWE_NODES"); do
    ns=$(node_ns "$n")
    stop_pidfile "$PWE_SSH_DIR/run/$ns.pid" sshd
    if ns_exists "$ns"; then
        kill_node_procs "$n"
        ip link del "$(node_veth "$n")" >/dev/null 2>&1
        ip netns del "$ns" && say "$ns: deleted"
    fi
done
stop_pidfile "$PWE_SSH_DIR/run/pwe-local.pid" sshd && say "sshd pwe-local: stopped"
ip link del "$PWE_BRIDGE" >/dev/null 2>&1 && say "bridge $PWE_BRIDGE: deleted"
remove_etc_hosts
command -v scontrol >/dev/null && { stop_slurm; say "slurm: stopped"; }
stop_pidfile /run/munge/munged.pid munged && say "munge: stopped"
stop_pidfile "$PWE_REDIS_DIR/redis.pid" redis-server && say "redis: stopped"
