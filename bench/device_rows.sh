#!/usr/bin/env bash
# Issue 23's rows for a many-core machine with a GPU (the `device` machine: 16 cores, one
# NVIDIA GPU, Python 3.12 with PyTorch, no package registry). From the repository's root:
#     bash bench/device_rows.sh WHEELS_DIR      (WHEELS_DIR: pwe's dependencies and hyperqueue, as wheels)
# Each step has its own time limit, so one that fails leaves the others their time.
set -u
W=${1:?a folder of wheels}
py=python3
echo "== machine"; nproc; $py --version; nvidia-smi -L 2>&1 | head -2; uptime
$py -m pip install -q --no-index --find-links "$W" pydantic paramiko croniter redis 2>&1 | tail -2
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
cd bench
echo "== 16 and 2 slots, 20,000 x true: pwe whole command against the bare loop, alternated"
timeout 200 $py dispatch_cores.py --members 20000 --repeat 3 --case 16:auto --case 2:auto
echo "== peers: W1 6,000 x true on 16 slots, W2 400 x sleep 0.05 on 16 slots"
timeout 240 $py peers.py --install --wheels "../$W" --peers bare,xargs,pwe,hq --repeat 3 \
    --w1-members 6000 --w1-slots 16 --w2-members 400 --w2-slots 16
echo "== GPU members beside CPU members"
timeout 120 $py gpu_members.py --members 8 --cpu-members 64
