#!/bin/bash
#PBS -N pwe-r1-p1
#PBS -l nodes=2:ppn=8
#PBS -l walltime=1:30:00
#PBS -o /runs/r1/pilots/p1/job.out
#PBS -e /runs/r1/pilots/p1/job.err
#PBS -q short
#PBS -A abc123
# pwe pilot p1: one allocation, many members
module load python
export OMP_PLACES=cores
export ODD='a b'"'"'c'
export PYTHONPATH=/opt/pwe${PYTHONPATH:+:$PYTHONPATH}
pwe notify --run /runs/r1 --pilot p1 started "${PBS_JOBID:-$SLURM_JOB_ID}"
trap 'exit 143' TERM
trap 'pwe notify --run /runs/r1 --pilot p1 ended "${PBS_JOBID:-$SLURM_JOB_ID}" $?' EXIT
/usr/bin/python3 -m pilot --dir /runs/r1/pilots/p1 --walltime 90 --heartbeat 5
