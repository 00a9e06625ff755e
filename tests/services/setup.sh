#!/usr/bin/env bash
# Start the real services pwe's tests use, on this (Debian 12, root) machine:
#   - munge and a one-node SLURM cluster (localhost, 8 CPUs, 2 count-only GPUs; partitions
#     debug, short, gpu),
#     with slurm-wlm-torque's qsub/qstat/qdel over it;
#   - 4 ssh "nodes": network namespaces pwe-n1..pwe-n4 (10.233.N.2) each with its own sshd,
#     on one bridge with the head (10.233.0.1), sharing this machine's filesystem;
#   - an sshd on 127.0.0.1:2222 (ssh host pwe-local) for remote-contact tests;
#   - Redis on 127.0.0.1:6391 with a password (url in /var/tmp/pwe-redis/url, mode 600);
#   - (packages only) chromium and chromium-driver, for the report's browser test; charliecloud,
#     busybox-static, lmod, podman and runc, for members in containers and modules.
# Use: ssh -F /var/tmp/pwe-ssh/ssh_config pwe-n1 CMD
# Idempotent: installs only missing packages, starts only what is down, repairs a node
# left killed; a second run when all is up takes about a second.
# Prints one line per service; exits 1 (with the reason) when any service cannot start.
# System files: it writes /etc/slurm/slurm.conf only when there is none or its own is there
# (else it says what to set and leaves SLURM down: may_write_slurm_conf), and adds its node
# names to /etc/hosts as one marked block, keeping every other line.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

need_root
# the daemons started below must not inherit a caller's lock (`flock /tmp/pwe-slurm.lock
# bash setup.sh`): a munged or redis-server holding that descriptor holds the lock for
# as long as it lives, and every later `flock /tmp/pwe-slurm.lock` waits forever
for fd in /proc/$$/fd/*; do
    n=${fd##*/}
    case "$n" in ''|*[!0-9]*) continue ;; esac
    [ "$n" -gt 2 ] && [ "$n" -lt 255 ] && eval "exec $n>&-"
done
take_lock 600
t0=$SECONDS
failed=()
skipped=()

install_packages || { echo "setup.sh: FAILED: cannot install packages" >&2; exit 1; }

if ! may_write_slurm_conf "$SLURM_CONF"; then
    skipped+=(slurm)  # its line said why and what to set; munge serves only SLURM here
elif start_munge; then
    start_slurm || failed+=(slurm)
else
    failed+=(munge)
    say "slurm: FAILED: munge is not running"; failed+=(slurm)
fi

start_redis || failed+=(redis)

start_ssh_nodes() (
    ssh_keys || { echo "cannot make the ssh keys in $PWE_SSH_DIR"; exit 1; }
    setup_bridge || { echo "cannot make bridge $PWE_BRIDGE"; exit 1; }
    for n in $(seq "$PWE_NODES"); do
        setup_node_net "$n" || { echo "cannot make the network of $(node_ns "$n")"; exit 1; }
    done
    # wait for exactly these jobs (a bare `wait -n` can be handed some other child and
    # then find none left: exit status 127, no message)
    pids=(); for n in $(seq "$PWE_NODES"); do start_node_sshd "$n" & pids+=($!); done
    rc=0; for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ "$rc" = 0 ] || exit 1
    start_local_sshd || exit 1
    write_ssh_client_files || exit 1
    write_etc_hosts || echo "warning: could not add the node names to /etc/hosts" >&2
)

# twice: a node's sshd can lose a race with the previous test session's teardown of it
for attempt in 1 2; do
    ssh_err=$(start_ssh_nodes) && [ -z "$ssh_err" ] && break
    [ -n "$ssh_err" ] || ssh_err="failed"
    echo "setup.sh: ssh nodes did not start (attempt $attempt): $ssh_err" >&2
    sleep 1
done

if [ -z "$ssh_err" ]; then
    # a real login on each, with the tests' identity and strict host key checking
    declare -A login
    for name in $(for n in $(seq "$PWE_NODES"); do node_ns "$n"; done) pwe-local; do
        login[$name]=$(mktemp)
        ( ssh_login "$name" >"${login[$name]}" 2>&1 || echo "ssh $name: exit $?" >>"${login[$name]}" ) &
    done
    wait
    for name in "${!login[@]}"; do
        if grep -q "^ssh $name: exit" "${login[$name]}"; then
            ssh_err+="login to $name failed: $(tr '\n' ' ' <"${login[$name]}")"$'\n'
        fi
        rm -f "${login[$name]}"
    done
fi
if [ -z "$ssh_err" ]; then
    say "ssh nodes: pwe-n1..pwe-n$PWE_NODES up (10.233.1.2..10.233.$PWE_NODES.2:22, hostnames pwe-nN; head 10.233.0.1)"
    say "ssh local: pwe-local up (127.0.0.1:$PWE_LOCAL_PORT)"
    say "ssh: use  ssh -F $PWE_SSH_DIR/ssh_config pwe-n1 CMD  (identity $PWE_SSH_DIR/id_ed25519, known_hosts $PWE_SSH_DIR/known_hosts)"
else
    say "ssh nodes: FAILED: $(printf '%s' "$ssh_err" | head -n1)"
    printf '%s\n' "$ssh_err" | tail -n +2 | sed 's/^/  | /'
    failed+=(ssh)
fi

if [ "${#failed[@]}" -gt 0 ]; then
    echo "setup.sh: FAILED: ${failed[*]} (after $((SECONDS - t0)) s)"
    exit 1
fi
if [ "${#skipped[@]}" -gt 0 ]; then
    echo "setup.sh: not started: ${skipped[*]} (see above); the rest is running, after $((SECONDS - t0)) s"
    exit 1
fi
say "services: all up in $((SECONDS - t0)) s"
