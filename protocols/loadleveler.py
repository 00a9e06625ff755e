"""IBM Tivoli Workload Scheduler LoadLeveler: llsubmit / llq / llcancel.

The job command file (``templates/loadleveler.cmd.j2``) carries its options as
``# @ keyword = value`` lines ending with ``# @ queue``; the rest of the file is the one
body every job script shares (``templates/_body.j2``), with ``$LOADL_STEP_ID`` as the
job id. ``# @ restart = no`` matters for a pilot: a restartable step that is vacated goes
back to Idle and would run again later as a second pilot over the same task file; not
restartable, a vacated step ends (state V) and the engine hands its members to a new
pilot.

Ids. ``llsubmit`` answers ``llsubmit: The job "host.example.com.123" has been submitted.``;
that is the *job* id. A command file with one ``# @ queue`` has one step, ``.0``, and the
step id (``host.example.com.123.0``) is what this module returns and what everything
else uses: it is ``$LOADL_STEP_ID`` in the job, llq's ``%id``, and what llcancel takes.
:meth:`LoadLeveler.status` also accepts a bare job id (it matches the job's steps).

Status. One ``llq -r %id %st ID...`` call for all the jobs: ``-r`` prints raw fields
separated by ``!``, one step a line. A step llq no longer lists has finished: LoadLeveler
drops finished steps from the queue (they live on only in the history files), so it is
COMPLETED, and the pilot's own events tell how it went. If llq itself fails (the
central manager does not answer) the states are UNKNOWN, never "finished".

User-exit callbacks. LoadLeveler calls programs on a job's edges only through exits that
the site administrator configures (JOB_PROLOG / JOB_EPILOG, JOB_USER_PROLOG /
JOB_USER_EPILOG in LoadL_config), and the user-level ``notification`` keyword only sends
mail. A user cannot install an exit per job, so the command file calls the edge events
itself, like the SLURM script: ``pwe notify ... started "$LOADL_STEP_ID"`` before the
pilot and an EXIT trap for ``ended`` with the exit status; a TERM trap (llcancel, the
wall clock limit) makes that status 143. A step killed with SIGKILL (hard wall clock
limit reached after the grace) never runs its trap; the status poll covers that edge.
"""

from __future__ import annotations

import re

from .base import JobState, Protocol, SubmitError
from .runner import CommandResult

#: llq's short state codes (``%st``), mapped fully
STATES = {
    # waiting: no processes of the step run (yet, or for now)
    "I": JobState.PENDING,    # Idle: considered for dispatch
    "NQ": JobState.PENDING,   # Not Queued: user/class limits (maxqueued, maxidle), schedd down
    "H": JobState.PENDING,    # user hold
    "S": JobState.PENDING,    # system hold
    "HS": JobState.PENDING,   # user and system hold
    "D": JobState.PENDING,    # Deferred: startdate in the future
    "P": JobState.PENDING,    # Pending: being dispatched, the startds have not all acknowledged
    "ST": JobState.PENDING,   # Starting: dispatched, the processes are being started (no pilot yet)
    "X": JobState.PENDING,    # Rejected by a node's startd: requeued, or held/cancelled (ACTION_ON_MAX_REJECT)
    "XP": JobState.PENDING,   # Reject Pending
    "E": JobState.PENDING,    # Preempted with the suspend method: stopped, resumes later (SLURM's SUSPENDED)
    "MP": JobState.PENDING,   # Resume Pending: still suspended
    # the allocation exists: processes run (or are being torn down)
    "R": JobState.RUNNING,    # Running
    "CK": JobState.RUNNING,   # Checkpointing
    "EP": JobState.RUNNING,   # Preempt Pending: runs until the preemption takes
    "CP": JobState.RUNNING,   # Complete Pending: ending (SLURM's COMPLETING)
    "RP": JobState.RUNNING,   # Remove Pending: llcancel or a limit, processes still being killed
    "VP": JobState.RUNNING,   # Vacate Pending: being vacated
    # finished
    "C": JobState.COMPLETED,  # Completed (exit status not in llq's short form; the pilot's events say)
    "TX": JobState.COMPLETED, # Terminated: ended while the negotiator and the schedd lost touch
    "CA": JobState.CANCELLED, # Canceled by a user or an administrator (llcancel)
    "NR": JobState.CANCELLED, # Not Run: a dependency evaluated false, never will run (SLURM's REVOKED)
    "RM": JobState.TIMEOUT,   # Removed: stopped by LoadLeveler itself; for a pilot, its hard wall_clock_limit
    "V": JobState.PREEMPTED,  # Vacated: taken off its nodes (preempted, node flushed); restart=no ends it
    "SX": JobState.FAILED,    # Submission Error: the step could not be submitted
}

_SUBMITTED = re.compile(r'The job "([^"]+)" has been submitted')
_NO_STATUS = "no job status to report"


class LoadLeveler(Protocol):
    name = "loadleveler"
    template = "loadleveler.cmd.j2"
    job_id = "$LOADL_STEP_ID"
    submit_command = ["llsubmit"]
    cancel_command = ["llcancel"]

    def streams(self, job) -> tuple[str, str]:
        """The ``output`` and ``error`` keywords: job.out and job.err by their names, read in
        the step's ``initialdir``, by default where llsubmit ran (the pilot's directory).
        LoadLeveler substitutes ``$(...)`` in a keyword's value, so the directory's path is
        never written in one (protocols/syntax.py)."""
        return "job.out", "job.err"

    def parse_job_id(self, out: str) -> str:
        """The step id from llsubmit's message (its job id and step 0)."""
        m = _SUBMITTED.search(out)
        if not m:
            raise SubmitError(f"cannot find a job id in llsubmit's answer {out.strip()!r}")
        return f"{m.group(1)}.0"

    @staticmethod
    def _rows(res: CommandResult) -> list[list[str]]:
        """llq -r rows, fields split on '!'."""
        return [[f.strip() for f in line.split("!")] for line in res.stdout.splitlines() if "!" in line]

    def _status_failed(self, res: CommandResult) -> bool:
        """llq fails when the central manager does not answer; an empty queue is an answer."""
        return res.status != 0 and _NO_STATUS not in res.stdout + res.stderr

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One llq call for all the jobs."""
        return ["llq", "-r", "%id", "%st", *job_ids]

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        """A step llq no longer lists has finished."""
        listed = {row[0]: STATES.get(row[1], JobState.UNKNOWN) for row in self._rows(res) if len(row) >= 2}
        out: dict[str, JobState] = {}
        for j in job_ids:
            if j in listed:
                out[j] = listed[j]
            else:  # a bare job id: its (only) step
                steps = [s for step, s in listed.items() if step.startswith(j + ".")]
                out[j] = steps[0] if steps else JobState.COMPLETED
        return out

    def _find_command(self, name: str) -> list[str]:
        return ["llq", "-r", "%id", "%jn"]

    def _parse_find(self, res: CommandResult, name: str) -> str | None:
        if self._status_failed(res):
            return None
        for row in self._rows(res):
            if len(row) >= 2 and row[1] == name:
                return row[0]
        return None
