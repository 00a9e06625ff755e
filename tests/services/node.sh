#!/usr/bin/env bash
# Simulate the death and return of a test node (network namespace pwe-nN of setup.sh).
#   node.sh kill N     its link goes down (peers see silence, as with a real dead node),
#                      then every process in the namespace is killed (kill -9)
#   node.sh revive N   link up, sshd (and the four-node cluster's slurmd) restarted;
#                      returns once ssh to it works again
#   node.sh status N   prints "up" or "down"; exit 0 when up
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"
. "$HERE/../cluster/common.sh"

usage() { echo "usage: $0 kill|revive|status N   (N in 1..$PWE_NODES)" >&2; exit 2; }
[ $# = 2 ] || usage
n=$2
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$PWE_NODES" ] || usage
ns=$(node_ns "$n")
need_root

case "$1" in
    kill)
        take_lock 120
        ns_exists "$ns" || { echo "node.sh: no namespace $ns (run tests/services/setup.sh)" >&2; exit 1; }
        ip link set "$(node_veth "$n")" down || exit 1
        kill_node_procs "$n" || { echo "node.sh: processes left in $ns: $(ip netns pids "$ns" | tr '\n' ' ')" >&2; exit 1; }
        # their pid files name no process now (pidfile.sh says why they must not stay)
        rm -f "$PWE_SSH_DIR/run/$ns.pid" "$PWE_CLUSTER_DIR/run/slurmd-$(cluster_node "$n").pid"
        # a login shell killed mid `pyenv rehash` leaves its lock: nobody holds it now
        pgrep -f pyenv-rehash >/dev/null || rm -f "${HOME:-/root}/.pyenv/shims/.pyenv-shim"
        echo "$ns: killed"
        ;;
    revive)
        take_lock 120
        setup_bridge && setup_node_net "$n" || { echo "node.sh: cannot bring up the network of $ns" >&2; exit 1; }
        err=$(start_node_sshd "$n") || { echo "node.sh: $err" >&2; exit 1; }
        out=$(ssh_login "$ns") || { echo "node.sh: ssh to $ns fails after revive: $out" >&2; exit 1; }
        # a node of the four-node SLURM cluster (tests/cluster/up.sh) gets its slurmd back
        if [ -f "$PWE_CLUSTER_CONF" ]; then
            err=$(start_cluster_slurmd "$n") || { echo "node.sh: $err" >&2; exit 1; }
        fi
        echo "$ns: up"
        ;;
    status)
        if out=$(ssh -o ConnectTimeout=3 -F "$PWE_SSH_DIR/ssh_config" "$ns" true </dev/null 2>&1); then
            echo up
        else
            echo down; exit 1
        fi
        ;;
    *) usage ;;
esac
