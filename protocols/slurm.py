"""SLURM: sbatch / squeue / scancel.

squeue and scontrol exit 1 both when asked only of jobs the controller no longer knows
(they ended: "Invalid job id specified") and when the controller does not answer
("Unable to contact slurm controller", "Socket timed out"); only the first is an answer.
A query that failed is UNKNOWN, never an end state.
"""

from __future__ import annotations

from .base import NO_FILE, JobState, Protocol, output_files
from .runner import CommandResult, CommandTimeout, ContactError

#: what squeue and scontrol say of a job id the controller no longer knows (or never knew)
INVALID_JOB = "Invalid job id specified"

#: squeue's %T long state names, mapped fully
STATES = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "SUSPENDED": JobState.PENDING, "STOPPED": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED, "FAILED": JobState.FAILED, "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT, "DEADLINE": JobState.TIMEOUT, "NODE_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED, "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY, "BOOT_FAIL": JobState.BOOT_FAIL,
    "SPECIAL_EXIT": JobState.FAILED, "REVOKED": JobState.CANCELLED,
}


class Slurm(Protocol):
    name = "slurm"
    template = "slurm.sh.j2"
    job_id = "$SLURM_JOB_ID"
    submit_command = ["sbatch", "--parsable"]
    cancel_command = ["scancel"]
    more_commands = ("scontrol", "sinfo")

    def submit_args(self, job) -> list[str]:
        """The job's output files, as argv (an ``#SBATCH`` line would split a path with a space)."""
        return [f"--{which}={path}" for which, path in zip(("output", "error"), self.streams(job) or (NO_FILE,) * 2)]

    def streams(self, job) -> tuple[str, str] | None:
        """The pilot's job.out and job.err, each ``%`` doubled: sbatch reads ``%j``, ``%x`` ...
        in them as its replacement symbols. None for a directory holding a backslash: SLURM
        then removes every backslash from the path (and replaces no ``%``), so no word names
        it (protocols/syntax.py); the job script writes its own output there."""
        out, err = output_files(job)
        if "\\" in job.pilot_dir:
            return None
        return out.replace("%", "%%"), err.replace("%", "%%")

    def parse_job_id(self, out: str) -> str:
        return out.strip().split(";")[0]  # --parsable: "id" or "id;cluster"

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One squeue call for all the jobs."""
        return ["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids)]

    def _status_failed(self, res: CommandResult) -> bool:
        """squeue answered unless it failed for another reason than not knowing the jobs."""
        return res.status != 0 and INVALID_JOB not in res.stderr + res.stdout

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        """A job squeue has forgotten (MinJobAge) is asked of scontrol; one that scontrol
        says is an invalid id is COMPLETED (its pilot's events tell the rest)."""
        out: dict[str, JobState] = {}
        for line in res.stdout.splitlines():
            words = line.split()
            if len(words) == 2:
                out[words[0]] = STATES.get(words[1].split("+")[0], JobState.UNKNOWN)
        for j in job_ids:
            if j not in out:
                out[j] = self._scontrol(j)
        return out

    def _pending_command(self, job_ids: list[str]) -> list[str]:
        """squeue's reason (%r): why a pending job waits (Resources, Priority, JobHeldUser,
        QOSMaxJobsPerUserLimit, ReqNodeNotAvail ...); None for one that runs."""
        return ["squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)]

    def _parse_pending(self, out: str, job_ids: list[str]) -> dict[str, str]:
        said: dict[str, str] = {}
        for line in out.splitlines():
            words = line.strip().split("|", 2)
            if len(words) == 3 and words[2] not in ("None", "(null)", ""):
                said[words[0]] = f"{words[1]}: {words[2]}"
        return said

    def _scontrol(self, job_id: str) -> JobState:
        try:
            res = self.runner.run(["scontrol", "-o", "show", "job", job_id], timeout=self.timeout)
        except (CommandTimeout, ContactError):
            return JobState.UNKNOWN
        for word in res.stdout.split():
            if word.startswith("JobState="):
                return STATES.get(word.split("=", 1)[1], JobState.UNKNOWN)
        if res.status != 0 and INVALID_JOB in res.stderr + res.stdout:
            return JobState.COMPLETED  # the controller forgot it: it ended long ago
        return JobState.UNKNOWN  # no answer (the controller is away): never an end

    def partitions(self) -> dict[str, dict[str, int]]:
        """What sinfo says of each partition: ``nodes`` (how many), ``cpus`` and ``memory``
        (MB) of its largest node, ``default`` (1 for the default partition). One ``sinfo``
        call; SchedulerUnreachable when it does not answer."""
        from .base import SchedulerUnreachable, _said

        try:
            # (asked before a run: a controller that is away costs 5 s, not the status timeout)
            res = self.runner.run(["sinfo", "-h", "-N", "-o", "%P|%N|%c|%m"], timeout=min(self.timeout, 5.0))
        except (CommandTimeout, ContactError) as exc:
            raise SchedulerUnreachable(f"sinfo: {exc}", exc.command) from exc
        if res.status != 0:
            raise SchedulerUnreachable(f"sinfo failed: {_said(res)}", res.command, res.status, res.stderr)
        out: dict[str, dict[str, int]] = {}
        seen: dict[str, set[str]] = {}
        for line in res.stdout.splitlines():
            words = line.strip().split("|")
            if len(words) != 4:
                continue
            name, node, cpus, memory = words
            default = name.endswith("*")
            part = out.setdefault(name.rstrip("*"), {"nodes": 0, "cpus": 0, "memory": 0, "default": int(default)})
            if node not in seen.setdefault(name, set()):
                seen[name].add(node)
                part["nodes"] += 1
            part["cpus"] = max(part["cpus"], int(cpus.rstrip("+")) if cpus.rstrip("+").isdigit() else 0)
            part["memory"] = max(part["memory"], int(memory.rstrip("+")) if memory.rstrip("+").isdigit() else 0)
        return out

    def _find_command(self, name: str) -> list[str]:
        return ["squeue", "-h", "-t", "all", "-o", "%i", "-n", name]

    def _parse_find(self, res: CommandResult, name: str) -> str | None:
        ids = res.stdout.split()
        return ids[0] if ids else None
