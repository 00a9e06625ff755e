"""``ssh`` (interactive): the pilot runs on the host's head node itself, no batch system.

Started under ``nohup`` over the host's contact (SSH, or this machine), so it outlives
the connection; its job id is ``PID.START``, its process id and start time there
(:mod:`pilot.identity`: a pid is recycled, the pair is not), which the starting shell also
writes to ``job.id`` in the pilot's directory: a start whose answer was lost (timed out)
is found by that file, never by a pattern over command lines. Status is one read of the
pilots' ``/proc/PID/stat``; cancel is SIGTERM (the pilot hands its members back, as when a
batch system stops it), sent only to a pid whose start time is still the recorded one.
A job id of an older pwe (the pid alone) is taken by its pid, as before.
"""

from __future__ import annotations

from pilot.identity import STAT_WORDS, split_word
from pwe.base.errors import SchedulerUnreachable

from .base import JobState, PilotJob, Protocol, SubmitError
from .runner import CommandResult, CommandTimeout, ContactError

#: the starting shell: the pilot under nohup, then its PID.START printed and written to
#: job.id (whole, by rename) in its directory
_START = ('cd "$1" || exit 1; nohup bash "$2" > job.out 2> job.err < /dev/null & p=$!; '
          + STAT_WORDS + ' || exit 1; echo "$p.$st" > job.id.part && mv -f job.id.part job.id && echo "$p.$st"')
#: the pilots still running as recorded: for each PID.START (or PID) word, its word when
#: the process runs, is no zombie and, where a start time is given, started then
_ALIVE = ('for w; do p=${w%%.*}; want=${w#"$p"}; want=${want#.}; s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; '
          's=${s##*) }; set -- $s; case $1 in Z|X) continue;; esac; '
          '[ -z "$want" ] || [ "${20}" = "$want" ] || continue; echo "$w"; done')
#: SIGTERM to each pilot still running as recorded (the same test, then kill)
_CANCEL = _ALIVE.replace('echo "$w"', 'kill -TERM "$p" 2>/dev/null')


class Interactive(Protocol):
    name = "ssh"
    template = "ssh.sh.j2"
    job_id = "$$"  # the script's own process: the pid `nohup bash` got (the job id adds its start time)
    cancel_command = ["kill", "-TERM"]

    def streams(self, job: PilotJob) -> tuple[str, str]:
        """job.out and job.err, where ``submit`` sends nohup's output (no batch system reads them)."""
        return "job.out", "job.err"

    def submit(self, job: PilotJob, script_path: str) -> str:
        try:
            res = self.runner.run(["sh", "-c", _START, "sh", job.pilot_dir, script_path], timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            if isinstance(exc, ContactError) and not exc.maybe_ran:
                raise
            found = self.find_job(job)
            if found:
                return found
            raise SubmitError(f"starting the pilot timed out and it wrote no job.id in {job.pilot_dir}",
                              exc.command) from exc
        word = res.stdout.strip()
        if res.status != 0 or split_word(word) is None:
            raise SubmitError(f"cannot start the pilot: {res.stderr.strip() or res.stdout.strip()}",
                              res.command, res.status, res.stderr)
        return word

    def find_job(self, job: PilotJob) -> str | None:
        """The pilot a start that did not answer made: the ``PID.START`` its starting shell
        wrote to ``job.id`` in the pilot's directory, while that process runs as recorded;
        None when there is no such file or process."""
        path = job.pilot_dir.rstrip("/") + "/job.id"
        try:
            res = self.runner.run(["sh", "-c", 'cat -- "$1" 2>/dev/null; exit 0', "sh", path], timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            raise SchedulerUnreachable(f"looking up {path}: {exc}", exc.command, maybe_ran=True) from exc
        word = res.stdout.strip()
        known = split_word(word)
        if known is None or known[1] is None:
            return None
        return word if self.status([word]).get(word) is JobState.RUNNING else None

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One shell for all the pilots: those still running as recorded."""
        return ["sh", "-c", _ALIVE, "sh", *[j for j in job_ids if split_word(j) is not None]]

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        """Running while its process runs as recorded (a zombie has ended, another start
        time is another process)."""
        alive = set(res.stdout.split())
        return {j: JobState.RUNNING if j in alive else JobState.COMPLETED for j in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        """SIGTERM to each pilot whose process still runs as recorded, tested and sent in one
        shell there (never a pid another process took since)."""
        words = [j for j in job_ids if split_word(j) is not None]
        if words:
            try:
                self.runner.run(["sh", "-c", _CANCEL, "sh", *words], timeout=self.timeout)
            except (CommandTimeout, ContactError):
                pass

    def find_by_name(self, name: str) -> str | None:
        """Never by a pattern over command lines: :meth:`find_job` reads the pilot's own
        ``job.id``."""
        return None
