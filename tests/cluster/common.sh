# The four-node SLURM cluster of tests/cluster/up.sh: names, paths and the steps that
# start it. Sourced (by up.sh, down.sh and tests/services/node.sh), never run. Every
# function is idempotent.
#
# The nodes are the test services' four network namespaces (tests/services/common.sh):
# pwe-n1..pwe-n4, each with its own address (10.233.N.2), host name and sshd, all on one
# bridge with the head (pwe-head, 10.233.0.1), all sharing this machine's filesystem, as
# a cluster's nodes share their home and scratch file systems. On them:
#   slurmctld  in the head's network under its own host name pwe-head (it refuses to run
#              under a name that is not its SlurmctldHost), port 6827, so it never meets
#              the one-node cluster's (6817, /etc/slurm/slurm.conf)
#   slurmd     one per namespace (nsenter --net, its own UTS: hostname pwe-nN), port 6818
#              there; per-node paths by %n
# Its configuration is its own file, $PWE_CLUSTER_CONF: a shell reaches this cluster
# with SLURM_CONF set to it (tests/cluster/env.sh) and the one-node cluster without.

PWE_CLUSTER_DIR=/var/tmp/pwe-cluster
PWE_CLUSTER_CONF=$PWE_CLUSTER_DIR/slurm.conf
PWE_CLUSTER_CTLD_PORT=6827
PWE_CLUSTER_CPUS=2          # per node
PWE_CLUSTER_MEMORY=2000     # MB per node
PWE_CLUSTER_CONF_MARKER="# Four-node SLURM cluster for pwe's tests (written by tests/cluster/up.sh)."
# Open MPI and PMIx must be installed before slurmd starts: a slurmd started without them
# cannot load PMIx and `srun --mpi=pmix` then hangs. mpicc (libopenmpi-dev) builds the
# tests' MPI program.
PWE_CLUSTER_PACKAGES=(openmpi-bin libopenmpi-dev libpmix2)

cluster_node() { echo "pwe-n$1"; }

cluster_conf_text() {
    local n addrs=""
    for n in $(seq "$PWE_NODES"); do addrs+="${addrs:+,}$(node_addr "$n")"; done
    cat <<EOF
$PWE_CLUSTER_CONF_MARKER
ClusterName=pwe4
SlurmctldHost=pwe-head($PWE_HEAD_ADDR)
SlurmctldPort=$PWE_CLUSTER_CTLD_PORT
SlurmdPort=6818
$(slurm_conf_common CR_Core_Memory)
# a node that stops answering is DOWN after about this long (the pilot notices sooner)
SlurmdTimeout=30
StateSaveLocation=$PWE_CLUSTER_DIR/state
SlurmdSpoolDir=$PWE_CLUSTER_DIR/spool/%n
SlurmctldPidFile=$PWE_CLUSTER_DIR/run/slurmctld.pid
SlurmdPidFile=$PWE_CLUSTER_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$PWE_CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$PWE_CLUSTER_DIR/log/slurmd-%n.log
# each node its own /tmp for SLURM (PMIx steps of two nodes collide in one shared /tmp)
TmpFS=$PWE_CLUSTER_DIR/nodetmp/%n
SlurmctldDebug=info
SlurmdDebug=info
NodeName=pwe-n[1-$PWE_NODES] NodeAddr=$addrs CPUs=$PWE_CLUSTER_CPUS RealMemory=$PWE_CLUSTER_MEMORY State=UNKNOWN
PartitionName=batch Nodes=pwe-n[1-$PWE_NODES] Default=YES MaxTime=INFINITE MaxNodes=$PWE_NODES State=UP
# a partition of smaller nodes (SLURM holds each job there to 500 MB a node): where a member's
# retry grew past them, its next attempt needs a pilot in batch (tests/cluster/test_cluster.py)
PartitionName=small Nodes=pwe-n[1-2] MaxTime=INFINITE MaxNodes=2 DefMemPerNode=500 MaxMemPerNode=500 State=UP
EOF
}

cluster_env() { SLURM_CONF=$PWE_CLUSTER_CONF "$@"; }

cluster_ctld_alive() { alive "$PWE_CLUSTER_DIR/run/slurmctld.pid" slurmctld; }
cluster_slurmd_alive() { alive "$PWE_CLUSTER_DIR/run/slurmd-$(cluster_node "$1").pid" slurmd; }

cluster_dirs() {
    local n
    mkdir -p "$PWE_CLUSTER_DIR"/{state,run,log} || return 1
    for n in $(seq "$PWE_NODES"); do
        # slurm makes neither a node's spool nor its TmpFS
        mkdir -p "$PWE_CLUSTER_DIR/spool/$(cluster_node "$n")" "$PWE_CLUSTER_DIR/nodetmp/$(cluster_node "$n")" || return 1
        chmod 1777 "$PWE_CLUSTER_DIR/nodetmp/$(cluster_node "$n")"
    done
}

cluster_packages() {
    local missing=() log=/var/tmp/pwe-cluster-apt.log
    read -ra missing <<<"$(missing_packages "${PWE_CLUSTER_PACKAGES[@]}")"  # (tests/services/common.sh)
    [ "${#missing[@]}" = 0 ] && return 0
    if ! { apt-get update -q && apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 \
            "${missing[@]}"; } >"$log" 2>&1; then
        say "slurm4: FAILED: cannot install ${missing[*]}"
        tail_log "$log" 20
        return 1
    fi
}

# start_cluster_slurmd N: node N's slurmd in its namespace, unless it runs there already
start_cluster_slurmd() {
    local node ns
    node=$(cluster_node "$1"); ns=$(node_ns "$1")
    cluster_slurmd_alive "$1" && return 0
    ns_exists "$ns" || { echo "no namespace $ns"; return 1; }
    # not `ip netns exec`: it remounts /sys, hiding /sys/fs/cgroup, and slurmd 22.05 dies
    SLURM_CONF=$PWE_CLUSTER_CONF nsenter --net="/run/netns/$ns" unshare --uts -- \
        sh -c "hostname '$node' && exec slurmd -N '$node'" >>"$PWE_CLUSTER_DIR/log/slurmd-$node.out" 2>&1 3>&- 9>&- ||
        { echo "slurmd of $node did not start"; tail_log "$PWE_CLUSTER_DIR/log/slurmd-$node.out";
          tail_log "$PWE_CLUSTER_DIR/log/slurmd-$node.log"; return 1; }
}

cluster_states() { cluster_env sinfo -h -N -o '%N %t' 2>/dev/null; }

# start_cluster: controller, four slurmds, and every node idle (a node left down by a
# test that killed it is given back)
start_cluster() {
    local n i states bad t0=$SECONDS
    cluster_packages || return 1
    cluster_dirs || { say "slurm4: FAILED: cannot make $PWE_CLUSTER_DIR"; return 1; }
    if ! cmp -s <(cluster_conf_text) "$PWE_CLUSTER_CONF"; then
        cluster_conf_text >"$PWE_CLUSTER_CONF.new" && mv "$PWE_CLUSTER_CONF.new" "$PWE_CLUSTER_CONF"
        if cluster_ctld_alive; then cluster_env scontrol reconfigure >/dev/null 2>&1; fi
    fi
    if ! cluster_ctld_alive; then
        # under its own host name: slurmctld runs only on its SlurmctldHost
        SLURM_CONF=$PWE_CLUSTER_CONF unshare --uts -- sh -c 'hostname pwe-head && exec slurmctld' \
            >>"$PWE_CLUSTER_DIR/log/slurmctld.out" 2>&1 3>&- 9>&- ||
            { say "slurm4: FAILED: slurmctld did not start"; tail_log "$PWE_CLUSTER_DIR/log/slurmctld.out";
              tail_log "$PWE_CLUSTER_DIR/log/slurmctld.log"; return 1; }
    fi
    for n in $(seq "$PWE_NODES"); do
        out=$(start_cluster_slurmd "$n") || { say "slurm4: FAILED: $out"; return 1; }
    done
    for i in $(seq 120); do  # up to 60 s
        states=$(cluster_states)
        bad=$(awk '$2 !~ /^(idle|mix|alloc|comp)$/ {print $1}' <<<"$states")
        [ -n "$states" ] && [ -z "$bad" ] && break
        if [ $((i % 6)) = 5 ] && [ -n "$bad" ]; then
            for n in $bad; do cluster_env scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1; done
        fi
        sleep 0.5
    done
    if [ -z "$states" ] || [ -n "$bad" ]; then
        say "slurm4: FAILED: nodes not idle after $((SECONDS - t0)) s: $(tr '\n' ' ' <<<"${states:-no answer from sinfo}")"
        tail_log "$PWE_CLUSTER_DIR/log/slurmctld.log"
        # and each such node's own side: which slurmd its pid file names, and its last words
        for n in $(sort -u <<<"$bad"); do
            echo "  --- $n: pid file $PWE_CLUSTER_DIR/run/slurmd-$n.pid says '$(cat "$PWE_CLUSTER_DIR/run/slurmd-$n.pid" 2>/dev/null)'"
            tail_log "$PWE_CLUSTER_DIR/log/slurmd-$n.log" 5
        done
        return 1
    fi
    say "slurm4: up (pwe-n[1-$PWE_NODES], $PWE_CLUSTER_CPUS CPUs and $PWE_CLUSTER_MEMORY MB each, partitions batch and small (500 MB a node); controller pwe-head:$PWE_CLUSTER_CTLD_PORT; SLURM_CONF=$PWE_CLUSTER_CONF)"
}

stop_cluster() {
    local n
    if cluster_ctld_alive; then
        cluster_env scontrol shutdown >/dev/null 2>&1
        for i in $(seq 50); do cluster_ctld_alive || break; sleep 0.2; done
    fi
    for n in $(seq "$PWE_NODES"); do stop_pidfile "$PWE_CLUSTER_DIR/run/slurmd-$(cluster_node "$n").pid" slurmd; done
    stop_pidfile "$PWE_CLUSTER_DIR/run/slurmctld.pid" slurmctld
}
