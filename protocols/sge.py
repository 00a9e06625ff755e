"""Grid Engine (SGE, Son of Grid Engine, Debian's gridengine 8.1): qsub / qstat / qdel.

Submission. ``qsub -terse SCRIPT`` answers the job id alone (``123``; an array job
``123.1-4:1``, whose job is ``123``). The script's ``#$`` lines (``templates/sge.sh.j2``)
carry the options: a pilot of more than one slot names the host's parallel environment
(``-pe PE nodes*cores_per_node``); SGE spreads those slots over hosts as the PE's
allocation_rule says, and the pilot reads where they landed from ``$PE_HOSTFILE``
(``pilot/allocation.py``); without a PE the job has one slot, and so has its pilot
(``$NSLOTS``). No ``-V``: the job starts in SGE's own environment (a short PATH), as a
PBS job does, with the host's ``setup`` lines and ``env`` (and never the submitter's
SLURM_* or PBS_* variables, which would tell the pilot it runs elsewhere). ``-r n``: a
pilot is never rerun by SGE under the same id (the engine starts a new one).

Status. One ``qstat -xml`` for all of the user's jobs, whatever the number of pilots: each
``job_list`` has ``JB_job_number`` and ``state`` (``qw``, ``hqw``, ``r``, ``t``, ``Eqw``,
``dr``, ``s``...). A job qstat no longer lists has ended: ``qacct -j ID`` is asked, once,
for how (``failed`` and ``exit_status``; the accounting file may lag a second or be off:
then COMPLETED, and the pilot's own events tell the rest). A job in an error state
(``Eqw``: SGE could not start it, e.g. its output path cannot be written) never leaves it
by itself: FAILED, and it is deleted then and there, so that nobody's ``qmod -cj`` can
later start it as a stale second pilot over tasks handed on meanwhile. A qstat that fails
(qmaster down: "unable to contact qmaster", "commlib error") is no answer: UNKNOWN.

Cancel: ``qdel``. SGE kills a deleted job with SIGKILL (no ``-notify`` here: its SIGUSR1
before a suspension would kill the pilot), so the script's EXIT trap cannot say "ended";
the next status poll sees the job gone. Inside the job its id is ``$JOB_ID``.

Where the commands are: Debian's gridengine-client and slurm-wlm-torque (PBS's qsub over
SLURM) conflict (both ship /usr/bin/qsub), and SGE's own layout keeps them in
``$SGE_ROOT/bin/<arch>``: a host's ``commands_dir`` names that directory (base.py runs every
command of the protocol from it). The commands read ``SGE_ROOT`` (and ``SGE_CELL``, the
ports) from the environment pwe runs them in, as SLURM's read their slurm.conf.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from .base import NO_FILE, JobState, Protocol
from .runner import CommandResult, CommandTimeout, ContactError

#: words of a failed qstat / qconf meaning the qmaster could not be asked (not a refusal)
UNREACHABLE = ("unable to contact qmaster", "commlib error", "can't connect", "unable to send message",
               "got no connection", "endpoint not unique")

#: qacct's ``failed`` codes that say how a job ended (the rest, non-zero, are FAILED)
FAILED_TIMEOUT = {37}    # qmaster enforced h_rt, h_cpu or h_vmem
FAILED_KILLED = {100}    # "assumedly after job": killed by a signal (qdel; SIGKILL, exit status 137)


def job_state(code: str) -> JobState:
    """One qstat state code (``qw``, ``hqw``, ``r``, ``Eqw``, ``dr``, ``Rr``, ``s``...) as a
    JobState. Letters: E error, d being deleted, s/S/T suspended (by the user, a queue, a
    threshold), r running, t being transferred to the node, R restarted, h hold, q queued,
    w waiting, z zombie (ended)."""
    if not code or not code.isalpha():
        return JobState.UNKNOWN
    if "E" in code:
        return JobState.FAILED
    if "z" in code:
        return JobState.COMPLETED
    if "d" in code and not any(c in code for c in "rtsST"):
        return JobState.CANCELLED  # deleted before it started: gone at the next poll
    if any(c in code for c in "sST"):
        return JobState.PENDING  # suspended: its processes stopped (SLURM's SUSPENDED)
    if "r" in code or "t" in code:
        return JobState.RUNNING
    if any(c in code for c in "qwhR"):
        return JobState.PENDING
    return JobState.UNKNOWN


def parse_qstat_xml(text: str) -> dict[str, str]:
    """``qstat -xml``'s jobs: {job number: state code}. ValueError when it is not that XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"qstat -xml answered no XML ({exc})") from None
    if root.tag != "job_info":
        raise ValueError(f"qstat -xml answered <{root.tag}>, not <job_info>")
    out = {}
    for job in root.iter("job_list"):
        number, state = job.findtext("JB_job_number"), job.findtext("state")
        if number and state:
            out.setdefault(number.strip(), state.strip())  # (an array job: one line per task; the first)
    return out


def parse_qacct(text: str) -> JobState | None:
    """How a finished job ended, from ``qacct -j ID``; None when it does not say."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("failed", "exit_status") and value.strip():
            fields[key] = value.split()[0]
    if not fields.get("failed", "").isdigit() or not fields.get("exit_status", "").isdigit():
        return None
    failed, status = int(fields["failed"]), int(fields["exit_status"])
    if failed in FAILED_TIMEOUT:
        return JobState.TIMEOUT
    if failed in FAILED_KILLED and status == 137:
        return JobState.CANCELLED
    if failed or status:
        return JobState.FAILED
    return JobState.COMPLETED


class Sge(Protocol):
    name = "sge"
    template = "sge.sh.j2"
    job_id = "$JOB_ID"
    submit_command = ["qsub", "-terse"]
    cancel_command = ["qdel"]
    more_commands = ("qacct", "qconf")
    unreachable_words = Protocol.unreachable_words + UNREACHABLE

    def submit_args(self, job) -> list[str]:
        """``-o /dev/null -e /dev/null``: Grid Engine reads ``-o``/``-e`` as ``[host:]path``
        and expands ``$HOME``, ``$JOB_ID``... in them (and in ``-cwd``'s directory), with no
        escape, so the pilot's directory never reaches it; the job script writes its own
        output to job.out and job.err (:meth:`streams` is None, protocols/syntax.py)."""
        return ["-o", NO_FILE, "-e", NO_FILE]

    def parse_job_id(self, out: str) -> str:
        """``qsub -terse``: the id alone; an array job's ``123.1-4:1`` is job 123."""
        m = re.match(r"\s*(\d+)", out)
        if not m:
            from .base import SubmitError

            raise SubmitError(f"cannot find a job id in qsub's answer {out.strip()!r}")
        return m.group(1)

    def _status_command(self, job_ids: list[str]) -> list[str]:
        """One qstat for all the jobs (qstat -xml takes no list of ids: it lists the user's)."""
        return ["qstat", "-xml"]

    def _status_failed(self, res: CommandResult) -> bool:
        if res.status != 0:
            return True
        try:
            parse_qstat_xml(res.stdout)
        except ValueError:
            return True
        return False

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:
        listed = parse_qstat_xml(res.stdout)
        out: dict[str, JobState] = {}
        for j in job_ids:
            number = j.split(".")[0]
            out[j] = job_state(listed[number]) if number in listed else self._ended(number)
        errors = [j.split(".")[0] for j in job_ids if "E" in listed.get(j.split(".")[0], "")]
        if errors:
            self.cancel(errors)  # (see the module's docstring: never a stale pilot later)
        return out

    def _pending_command(self, job_ids: list[str]) -> list[str]:
        """qstat -j: each job's details, its ``scheduling info:`` lines (written when the
        cell's scheduler keeps them: schedd_job_info true in qconf -ssconf)."""
        return ["qstat", "-j", ",".join(j.split(".")[0] for j in job_ids)]

    def _parse_pending(self, out: str, job_ids: list[str]) -> dict[str, str]:
        said: dict[str, list[str]] = {}
        job = None
        info = False
        for line in out.splitlines():
            if line.startswith("job_number:"):
                number = line.split(":", 1)[1].strip()
                job = next((j for j in job_ids if j.split(".")[0] == number), None)
                info = False
            elif line.startswith("scheduling info:"):
                info = job is not None
                first = line.split(":", 1)[1].strip()
                if info and first:
                    said.setdefault(job, []).append(first)
            elif info and line[:1] in (" ", "\t") and line.strip():
                said.setdefault(job, []).append(line.strip())
            else:
                info = False
        return {j: "; ".join(lines[:3]) for j, lines in said.items()}

    def _ended(self, number: str) -> JobState:
        """A job qstat no longer lists: how it ended, from qacct; COMPLETED when qacct has
        no record (yet, or accounting is off) or is not there."""
        try:
            res = self.runner.run(["qacct", "-j", number], timeout=self.timeout)
        except (CommandTimeout, ContactError):
            return JobState.COMPLETED
        return (parse_qacct(res.stdout) if res.status == 0 else None) or JobState.COMPLETED

    def _find_command(self, name: str) -> list[str]:
        return ["qstat", "-xml"]

    def _parse_find(self, res: CommandResult, name: str) -> str | None:
        root = ET.fromstring(res.stdout)
        for job in root.iter("job_list"):
            if (job.findtext("JB_name") or "").strip() == name:
                return (job.findtext("JB_job_number") or "").strip() or None
        return None

    def parallel_environments(self) -> list[str]:
        """The cell's parallel environments (``qconf -spl``). SchedulerUnreachable when
        qconf does not answer; [] when the cell has none ("no parallel environment defined")."""
        from .base import SchedulerUnreachable, _said

        try:
            res = self.runner.run(["qconf", "-spl"], timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            raise SchedulerUnreachable(f"qconf -spl: {exc}", exc.command) from exc
        if "no parallel environment defined" in res.stdout + res.stderr:
            return []
        if res.status != 0:
            raise SchedulerUnreachable(f"qconf -spl failed: {_said(res)}", res.command, res.status, res.stderr)
        return res.stdout.split()
