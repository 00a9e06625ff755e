"""``ssh`` (interactive): the pilot runs on the host's head node itself, no batch system.

Started under ``nohup`` over the host's contact (SSH, or this machine), so it outlives
the connection; its job id is its process id. Status is one ``ps`` for all pilots;
cancel is SIGTERM (the pilot hands its members back, as when a batch system stops it).
"""

from __future__ import annotations

from .base import JobState, PilotJob, Protocol, SubmitError
from .runner import CommandResult, CommandTimeout


class Interactive(Protocol):
    name = "ssh"
    template = "ssh.sh.j2"
    job_id = "$$"  # the script's own process: the pilot's job id is the pid `nohup bash` got
    cancel_command = ["kill", "-TERM"]

    def streams(self, job: PilotJob) -> tuple[str, str]:
        """job.out and job.err, where ``submit`` sends nohup's output (no batch system reads them)."""
        return "job.out", "job.err"

    def submit(self, job: PilotJob, script_path: str) -> str:
        # the script's own path marks the process, so find_by_name can spot a duplicate
        start = 'cd "$1" && nohup bash "$2" > job.out 2> job.err < /dev/null & echo $!'
        try:
            res = self.runner.run(["sh", "-c", start, "sh", job.pilot_dir, script_path], timeout=self.timeout)
        except CommandTimeout as exc:
            found = self._taken(script_path, exc)
            if found:
                return found
            raise SubmitError(f"starting the pilot timed out and no process runs {script_path}", exc.command) from exc
        pid = res.stdout.strip()
        if res.status != 0 or not pid.isdigit():
            raise SubmitError(f"cannot start the pilot: {res.stderr.strip() or res.stdout.strip()}",
                              res.command, res.status, res.stderr)
        return pid

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One ps for all the pilots."""
        return ["ps", "-o", "pid=,stat=", "-p", ",".join(job_ids)]

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        """Running while ps lists the process (a zombie has ended); ps exits 1 when it
        lists none of them: all have ended."""
        alive = {}
        for line in res.stdout.splitlines():
            words = line.split()
            if len(words) == 2:
                alive[words[0]] = words[1]
        return {j: JobState.RUNNING if j in alive and not alive[j].startswith("Z") else JobState.COMPLETED
                for j in job_ids}

    def _find_command(self, name: str) -> list[str]:
        return ["pgrep", "-f", "--", name]

    def _parse_find(self, res: CommandResult, name: str) -> str | None:
        pids = res.stdout.split()
        return pids[0] if pids else None
