#!/bin/bash
#$ -N pwe-r1-p1
#$ -S /bin/bash
#$ -r n
#$ -l h_rt=1:30:00
#$ -pe mpi 16
#$ -q short
#$ -A abc123
# pwe pilot p1: one allocation, many members
exec >>/runs/r1/pilots/p1/job.out 2>>/runs/r1/pilots/p1/job.err || exit 1
module load python
export OMP_PLACES=cores
export ODD='a b'"'"'c'
export PYTHONPATH=/opt/pwe${PYTHONPATH:+:$PYTHONPATH}
pwe_notify() { pwe notify --run /runs/r1 --pilot p1 "$@"; }
pwe_notify started "$JOB_ID"
trap 'exit 143' TERM
trap 'pwe_notify ended "$JOB_ID" $?' EXIT
/usr/bin/python3 -m pilot --dir /runs/r1/pilots/p1 --walltime 90 --heartbeat 5
