#!/usr/bin/env bash
# A real cluster on this one machine, for pwe's tests and for anyone who wants to try pwe
# against real schedulers: run it as root, then `. tests/cluster/env.sh`.
#   - the test services (tests/services/setup.sh): munge, a one-node SLURM with qsub over
#     it, four ssh nodes pwe-n1..pwe-n4 (network namespaces), Redis;
#   - slurm4: a four-node SLURM cluster on those nodes (tests/cluster/common.sh);
#   - sge: a Grid Engine cell, qmaster and one execd here (tests/cluster/sge.sh);
# and writes
#   tests/cluster/env.sh      SLURM_CONF, SGE_ROOT (and the rest a shell needs)
#   tests/cluster/hosts.yaml  pwe hosts for them: slurm4 (srun steps), slurm4-ssh (ssh),
#                             pbs4 (PBS through slurm-wlm-torque), sge, remote (slurm4 from
#                             a workstation sharing no file system with it: staged to the
#                             login node pwe-n1 over ssh)
# Idempotent: starts only what is not running; a second run when all is up takes seconds.
# One line per part; exits 1 (with the reason) when any part cannot start.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/../services/common.sh"
. "$HERE/common.sh"

need_root
t0=$SECONDS
failed=()
bash "$HERE/../services/setup.sh" || failed+=(services)

bash "$HERE/sge.sh" || failed+=(sge)

take_lock 600
if munge_ok && ssh_login pwe-n1 >/dev/null 2>&1; then
    start_cluster || failed+=(slurm4)
else
    say "slurm4: FAILED: needs munge and the ssh nodes of tests/services/setup.sh (above)"
    failed+=(slurm4)
fi

umask 022
cat >"$HERE/env.sh.new" <<ENV
# Written by tests/cluster/up.sh: the environment of a shell that uses the test clusters.
# SLURM's commands reach the four-node cluster with it, the one-node cluster without it.
export SLURM_CONF=$PWE_CLUSTER_CONF
export PWE_CLUSTER_HOSTS=$HERE/hosts.yaml
ENV
# the Grid Engine cell's variables (its commands stay off PATH: /usr/bin/qsub is PBS's)
[ -f "$HERE/sge.env" ] && grep '^export ' "$HERE/sge.env" >>"$HERE/env.sh.new"
mv "$HERE/env.sh.new" "$HERE/env.sh"
cat >"$HERE/hosts.yaml.new" <<HOSTS
# Written by tests/cluster/up.sh: pwe hosts of the test clusters (. tests/cluster/env.sh first).
hosts:
  slurm4:
    # one pilot job over up to four nodes; members through one srun --overlap agent step per node
    protocol: slurm
    cores_per_node: $PWE_CLUSTER_CPUS
    memory_per_node: $PWE_CLUSTER_MEMORY
    max_nodes: $PWE_NODES
    partitions:
      - {name: batch, max_nodes: $PWE_NODES}
  slurm4-ssh:
    # the same allocation; members over ssh from the node list (one session per node)
    protocol: slurm
    cores_per_node: $PWE_CLUSTER_CPUS
    memory_per_node: $PWE_CLUSTER_MEMORY
    max_nodes: $PWE_NODES
    launcher: ssh
    ssh_config: $PWE_SSH_DIR/ssh_config
    partitions:
      - {name: batch, max_nodes: $PWE_NODES}
  pbs4:
    # PBS's words (qsub -l nodes=2:ppn=2) through slurm-wlm-torque's front end to the same nodes
    protocol: pbs
    cores_per_node: $PWE_CLUSTER_CPUS
    max_nodes: 2
  sge:
    # the Grid Engine cell: one pilot job through its parallel environment
    protocol: sge
    commands_dir: $(. "$HERE/sge.env" 2>/dev/null; echo "${SGE_BIN:-/var/tmp/pwe-sge/root/bin/lx-amd64}")
    parallel_environment: pwe
    cores_per_node: 4
    max_nodes: 1
  remote:
    # slurm4 seen from a workstation that shares no file system with it and has no scheduler
    # commands: the workflow and its inputs are staged to the login node pwe-n1 over ssh,
    # the engine runs there, the results come back (shared_fs: false)
    protocol: slurm
    contact: ssh://pwe-n1
    ssh_config: $PWE_SSH_DIR/ssh_config
    shared_fs: false
    remote_dir: /var/tmp/pwe-login/runs
    remote_pwe: [env, SLURM_CONF=$PWE_CLUSTER_CONF, $(cd "$HERE/../.." && pwd)/.venv/bin/pwe]
    cores_per_node: $PWE_CLUSTER_CPUS
    memory_per_node: $PWE_CLUSTER_MEMORY
    max_nodes: $PWE_NODES
    partitions:
      - {name: batch, max_nodes: $PWE_NODES}
HOSTS
mv "$HERE/hosts.yaml.new" "$HERE/hosts.yaml"

if [ "${#failed[@]}" -gt 0 ]; then
    echo "cluster: FAILED: ${failed[*]} (after $((SECONDS - t0)) s)"
    exit 1
fi
say "cluster: all up in $((SECONDS - t0)) s (. $HERE/env.sh; hosts in $HERE/hosts.yaml)"
