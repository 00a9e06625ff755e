#!/bin/bash
# @ job_name = pwe-r1-p1
# @ job_type = parallel
# @ node = 2
# @ tasks_per_node = 8
# @ wall_clock_limit = 1:30:00
# @ output = job.out
# @ error = job.err
# @ class = short
# @ account_no = abc123
# @ environment = COPY_ALL
# @ shell = /bin/bash
# @ restart = no
# @ queue
# pwe pilot p1: one allocation, many members
module load python
export OMP_PLACES=cores
export ODD='a b'"'"'c'
export PYTHONPATH=/opt/pwe${PYTHONPATH:+:$PYTHONPATH}
pwe_notify() { pwe notify --run /runs/r1 --pilot p1 "$@"; }
pwe_notify started "$LOADL_STEP_ID"
trap 'exit 143' TERM
trap 'pwe_notify ended "$LOADL_STEP_ID" $?' EXIT
/usr/bin/python3 -m pilot --dir /runs/r1/pilots/p1 --walltime 90 --heartbeat 5
