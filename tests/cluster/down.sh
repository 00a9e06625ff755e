#!/usr/bin/env bash
# Stop what tests/cluster/up.sh started: the Grid Engine cell, the four-node SLURM
# cluster, then the test services (tests/services/teardown.sh). Keeps the packages and
# the state folders.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/../services/common.sh"
. "$HERE/common.sh"

need_root
bash "$HERE/sge-down.sh"
(
    take_lock 600
    command -v scontrol >/dev/null && { stop_cluster; say "slurm4: stopped"; }
)
bash "$HERE/../services/teardown.sh"
