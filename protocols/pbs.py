"""PBS / Torque: qsub / qstat / qdel.

qstat exits 153 (Torque's and PBS Pro's "Unknown Job Id") when it lists none of the jobs
asked about: they ended. Any other failure ("cannot connect to server"; slurm-wlm-torque's
"Problem loading jobs.", exit 8, when SLURM's controller is away) is no answer: UNKNOWN.
"""

from __future__ import annotations

from .base import NO_FILE, JobState, Protocol
from .runner import CommandResult

#: qstat's one-letter states (Torque and PBS Pro)
STATES = {
    "Q": JobState.PENDING, "H": JobState.PENDING, "W": JobState.PENDING, "T": JobState.PENDING,
    "S": JobState.PENDING, "U": JobState.PENDING, "M": JobState.PENDING,
    "R": JobState.RUNNING, "E": JobState.RUNNING, "B": JobState.RUNNING,
    "C": JobState.COMPLETED, "F": JobState.COMPLETED, "X": JobState.COMPLETED,
}
#: qstat's exit status for job ids it does not know (PBSE_UNKJOBID 15001, as an exit status)
UNKNOWN_JOB_STATUS = 153


class Pbs(Protocol):
    name = "pbs"
    template = "pbs.sh.j2"
    #: Torque's qsub front end over SLURM (slurm-wlm-torque, as in the tests) sets no
    #: PBS_JOBID in the job; its id there is SLURM's, which is what qsub answered
    job_id = "${PBS_JOBID:-$SLURM_JOB_ID}"
    submit_command = ["qsub"]
    cancel_command = ["qdel"]

    def submit_args(self, job) -> list[str]:
        """The output files on the command line (some qsub front ends ignore #PBS -o/-e, and a
        directive line would split a path with a space), as :meth:`streams` names them."""
        out, err = self.streams(job) or (NO_FILE, NO_FILE)
        return ["-o", out, "-e", err]

    def streams(self, job) -> tuple[str, str] | None:
        """job.out and job.err by their names in the pilot's directory, where qsub runs: a qsub
        front end that pastes its arguments into a shell line (slurm-wlm-torque's, a Perl
        script) never sees the run directory's path. None when that directory holds a ``%``
        or a backslash: the front end's SLURM joins the name to the job's working directory
        and reads ``%j`` or drops the backslashes there (protocols/syntax.py); the job script
        then writes its own output."""
        if any(c in job.pilot_dir for c in "%\\"):
            return None
        return "job.out", "job.err"

    def script_word(self, job, script_path: str) -> str:
        """The script by its name in the pilot's directory (qsub runs there), for the same reason."""
        head, _, name = script_path.rpartition("/")
        return name if head == job.pilot_dir.rstrip("/") and name else script_path

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One qstat call for all the jobs."""
        return ["qstat", *job_ids]

    def _status_failed(self, res: CommandResult) -> bool:
        """qstat answered unless it failed for another reason than not knowing the jobs."""
        said = res.stdout + res.stderr
        return res.status not in (0, UNKNOWN_JOB_STATUS) and "Unknown Job Id" not in said \
            and "Job has finished" not in said

    def _pending_command(self, job_ids: list[str]) -> list[str]:
        """qstat -f: each job's attributes, its ``comment`` (PBS Pro and Torque write why a
        job does not run there: "Not Running: Insufficient amount of resource: ncpus")."""
        return ["qstat", "-f", *job_ids]

    def _parse_pending(self, out: str, job_ids: list[str]) -> dict[str, str]:
        said: dict[str, str] = {}
        job = None
        for line in out.splitlines():
            if line.startswith("Job Id:"):
                number = line.split(":", 1)[1].strip().split(".")[0]
                job = next((j for j in job_ids if j.split(".")[0] == number), None)
            elif job is not None and line.strip().startswith("comment ="):
                said[job] = line.split("=", 1)[1].strip()
        return said

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        """A job qstat no longer lists has finished."""
        out: dict[str, JobState] = {}
        for line in res.stdout.splitlines():
            words = line.split()
            # Job ID  Name  User  Time Use  S  Queue
            if len(words) >= 6 and words[0][0].isdigit():
                jid = words[0].split(".")[0]
                for j in job_ids:
                    if j.split(".")[0] == jid:
                        out[j] = STATES.get(words[4], JobState.UNKNOWN)
        for j in job_ids:
            out.setdefault(j, JobState.COMPLETED)
        return out

    def _find_command(self, name: str) -> list[str]:
        return ["qstat"]

    def _parse_find(self, res: CommandResult, name: str) -> str | None:
        for line in res.stdout.splitlines():
            words = line.split()
            if len(words) >= 6 and words[1] == name[:len(words[1])] and words[4] in ("Q", "R", "H", "W"):
                return words[0]
        return None
