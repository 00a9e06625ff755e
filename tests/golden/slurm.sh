#!/bin/bash
#SBATCH --job-name=pwe-r1-p1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=1
#SBATCH --time=1:30:00
#SBATCH --no-kill
#SBATCH --no-requeue
#SBATCH --partition=short
#SBATCH --account=abc123
# pwe pilot p1: one allocation, many members
module load python
export OMP_PLACES=cores
export ODD='a b'"'"'c'
export PYTHONPATH=/opt/pwe${PYTHONPATH:+:$PYTHONPATH}
pwe_notify() { pwe notify --run /runs/r1 --pilot p1 "$@"; }
pwe_notify started "$SLURM_JOB_ID"
trap 'exit 143' TERM
trap 'pwe_notify ended "$SLURM_JOB_ID" $?' EXIT
/usr/bin/python3 -m pilot --dir /runs/r1/pilots/p1 --walltime 90 --heartbeat 5
