"""The seam between the engine and batch systems.

A protocol module gets allocations (pilot jobs): it renders a job script, submits it,
asks for the state of many jobs in one call, and cancels. Everything it runs goes
through one :class:`~protocols.runner.CommandRunner` (this machine or SSH to a login
node), so timeouts, errors and logging live in one place. A protocol is mostly data:
its commands, the shell word that expands to its job id inside a job, and the header
lines of its job script (``protocols/templates/<name>.j2``, which extends the one body,
``_body.j2``).

What is common to every protocol is done here, once: the submission that timed out is
looked up by name before anyone submits again, and :meth:`Protocol.status` answers UNKNOWN
for every job asked about when the scheduler does not answer (and says why in
``no_answer``). A failed query is never an end state: only an answer the protocol
recognises (:meth:`Protocol._status_failed`) says a job is no longer listed. A protocol
says only how to ask (``_status_command``, ``_find_command``) and how to read the answer
(``_parse_status``, ``_parse_find``). Errors are :class:`~pwe.base.errors.SubmitError`,
:class:`~pwe.base.errors.SchedulerUnreachable`, :class:`~pwe.base.errors.CommandTimeout` and
:class:`~pwe.base.errors.ContactError`, from the one tree in :mod:`pwe.base.errors`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pwe.base.errors import SchedulerUnreachable, SubmitError
from pwe.base.ids import is_job_id

from . import registry
from .runner import CommandResult, CommandRunner, CommandTimeout, ContactError

__all__ = ["JobState", "PilotJob", "Protocol", "SchedulerUnreachable", "SubmitError", "get", "walltime_hms"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
get = registry.get  # a protocol by name, from the one list


class JobState(enum.Enum):
    """What a batch system says of one pilot job."""

    PENDING = "pending"            #: queued, not started
    RUNNING = "running"            #: the allocation exists; the pilot should be up
    COMPLETED = "completed"        #: ended on its own (the pilot left: idle, stop, walltime drain)
    FAILED = "failed"              #: ended with a non-zero status
    CANCELLED = "cancelled"        #: scancel / qdel / llcancel, by pwe or by someone else
    TIMEOUT = "timeout"            #: hit its walltime: expected for a pilot, not a failure
    NODE_FAIL = "node_fail"        #: a node of the allocation failed
    PREEMPTED = "preempted"        #: taken back by the scheduler
    OUT_OF_MEMORY = "out_of_memory"
    BOOT_FAIL = "boot_fail"        #: the nodes never came up
    UNKNOWN = "unknown"            #: the scheduler did not answer (timed out): ask again later, never "failed"

    @property
    def finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN)


@dataclass
class PilotJob:
    """One pilot job to submit: everything its script needs."""

    pilot_id: str
    pilot_dir: str           # on the host's filesystem
    job_name: str
    nodes: int
    cores_per_node: int
    walltime: float          # minutes
    python: str = "python3"
    pythonpath: str = ""     # where the pilot package is on the host
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    memory_mb: int | None = None
    gpus_per_node: int = 0   # asked for when members of this pilot need GPUs
    begin: Any = None        # requestedStart: the earliest start, an aware datetime (pwe.workflow.starttime)
    setup: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    pilot_args: list[str] = field(default_factory=list)
    notify: list[str] | None = None  # the command (argv) a job's edge events call (pwe notify ...)
    parallel_environment: str | None = None  # SGE: the PE a job of more than one slot names

    @property
    def slots(self) -> int:
        """Cores the job asks for in all (SGE's slots)."""
        return self.nodes * self.cores_per_node




def walltime_hms(minutes: float) -> str:
    total = int(round(minutes * 60))
    return f"{total // 3600:d}:{total % 3600 // 60:02d}:{total % 60:02d}"


#: requestedStart in each scheduler's words: SLURM's --begin, PBS's -a, LoadLeveler's
#: startdate, SGE's -a ([[CC]YY]MMDDhhmm[.SS]). None has a time zone: they are written in
#: this machine's (pwe.workflow.starttime says why).
BEGIN_FORMS = {"slurm": "%Y-%m-%dT%H:%M:%S", "pbs": "%Y%m%d%H%M.%S", "loadleveler": "%m/%d/%Y %H:%M:%S",
               "sge": "%Y%m%d%H%M.%S"}


def _begin(when: Any, form: str) -> str:
    """A requested start (an aware datetime) in one scheduler's words."""
    return when.astimezone().strftime(BEGIN_FORMS[form])


_ENV: Any = None


def _env() -> Any:
    """The job scripts' jinja2 environment, made when the first script is rendered: a run
    whose pilots are started locally never imports jinja2 (issue 35)."""
    global _ENV
    if _ENV is None:
        import shlex

        import jinja2

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                                 trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
        env.filters.update(q=lambda v: shlex.quote(str(v)), hms=walltime_hms, begin=_begin)
        _ENV = env
    return _ENV


class Protocol:
    """Base of the protocols. A subclass sets its commands, its template and its job id
    variable, says how to ask for states and how to read the answer, and says what it can
    do (the engine asks these, never the protocol's name)."""

    name = "base"
    #: submits pilot jobs (a script, a job id); else its ``start()`` runs the pilot here (local)
    batch = True
    #: one :meth:`status` call answers for all its pilots; else each pilot's process is asked
    polls_status = True
    template = ""
    #: the shell word that expands to the job's id inside its script (for ``pwe notify``)
    job_id = ""
    submit_command: list[str] = []
    cancel_command: list[str] = []
    #: commands it runs besides those of the registry's list (which ``pwe hosts check``
    #: looks for): run from a host's ``commands_dir`` too
    more_commands: tuple[str, ...] = ()
    timeout = 30.0
    #: words in a failed command's answer saying that the scheduler could not be asked (its
    #: controller down, restarting, overloaded), not that it refused: ask again later
    unreachable_words: tuple[str, ...] = ("unable to contact", "not responding", "socket timed out",
                                          "connection refused", "connection timed out", "cannot connect to server",
                                          "unable to connect", "connection reset")

    def __init__(self, runner: CommandRunner, host: Any = None):
        """``host``: the registry entry submitted to, when there is one; its ``commands_dir``
        (the batch system's commands, not those first on the PATH) is where every command
        of this protocol is run from."""
        directory = getattr(host, "commands_dir", None)
        if directory:
            from .runner import InDir

            runner = InDir(runner, directory, registry.info(self.name).commands + self.more_commands)
        self.runner = runner
        #: why the last status query got no answer (its words); None when it was answered
        self.no_answer: str | None = None

    def render(self, job: PilotJob) -> str:
        """The job script. Each value is quoted for where it lands (templates/_body.j2);
        one holding a line break or a NUL is refused first (InputError, exit status 2):
        in a script or a directive line a line break starts a line a shell runs."""
        _one_line_each(job)
        from .syntax import directive_word

        streams = self.streams(job)
        return _env().get_template(self.template).render(
            job=job, protocol=self.name, job_id=self.job_id, streams=streams or (NO_FILE, NO_FILE),
            redirect=None if streams else output_files(job),
            w=lambda value, what="value": directive_word(self.name, value, what))

    def streams(self, job: PilotJob) -> tuple[str, str] | None:
        """The job's output and error files in words its batch system reads literally
        (protocols/syntax.py says what each reads), or None when it has none for this
        pilot's directory: then it is given /dev/null (:data:`NO_FILE`) and the job script
        sends its own output to :func:`output_files` (``exec``, the paths shell-quoted)."""
        return None

    def submit(self, job: PilotJob, script_path: str) -> str:
        """Submit; the job id. A submission that timed out is looked up by job name
        before anyone submits again, so a slow scheduler never gets a duplicate."""
        try:
            res = self.runner.run(self.submit_command + self.submit_args(job) + [self.script_word(job, script_path)],
                                  timeout=self.timeout, cwd=job.pilot_dir)
        except (CommandTimeout, ContactError) as exc:
            if isinstance(exc, ContactError) and not exc.maybe_ran:
                raise
            found = self._taken(job.job_name, exc)  # did it take? never submit twice
            if found and is_job_id(found):
                return found
            raise SubmitError(f"{self.submit_command[0]} did not answer ({exc}) and no job named "
                              f"{job.job_name} exists", exc.command) from exc
        if res.status != 0 and self._unreachable(res):  # not taken, not refused: the controller is away
            raise SchedulerUnreachable(f"{self.submit_command[0]} failed: {_said(res)}", res.command, res.status,
                                       res.stderr)
        if res.status != 0:
            raise SubmitError(f"{self.submit_command[0]} failed: {res.stderr.strip() or res.stdout.strip()}",
                              res.command, res.status, res.stderr)
        try:
            job_id = self.parse_job_id(res.stdout)
            if not is_job_id(job_id):
                raise SubmitError(f"cannot find a job id in {self.submit_command[0]}'s answer {res.stdout.strip()!r}")
            return job_id
        except SubmitError as exc:  # the answer names no job: keep what was run and what it said
            exc.command, exc.status, exc.stderr = res.command, res.status, res.stderr
            raise

    def _taken(self, name: str, exc: Exception) -> str | None:
        """After a submission that did not answer (``exc``): the job it made, found by its
        name, or None. When the lookup cannot answer either, nobody can tell whether it
        took: :class:`~pwe.base.errors.SchedulerUnreachable` with ``maybe_ran``."""
        try:
            return self.find_by_name(name)
        except SchedulerUnreachable as again:
            raise SchedulerUnreachable(f"{exc}, nor did the lookup of {name} answer ({again})",
                                       getattr(exc, "command", None), maybe_ran=True) from exc

    def submit_args(self, job: PilotJob) -> list[str]:
        """Options given on the submit command line (for what a script directive cannot say)."""
        return []

    def script_word(self, job: PilotJob, script_path: str) -> str:
        """How the script is named to the submit command (run in the pilot's directory)."""
        return script_path

    def parse_job_id(self, out: str) -> str:
        m = re.search(r"(\d+(?:\.[\w.-]+)?)", out)
        if not m:
            raise SubmitError(f"cannot find a job id in {out!r}")
        return m.group(1)

    def status(self, job_ids: list[str]) -> dict[str, JobState]:
        """The state of every job in ``job_ids``, from one query. No ids, no query. When the
        scheduler does not answer (the query timed out, the host cannot be reached, or the
        answer is a failure, :meth:`_status_failed`) every job asked about is UNKNOWN: ask
        again later, never "finished"."""
        out = {j: JobState.UNKNOWN for j in job_ids if not is_job_id(j)}  # never asked: not a job id
        asked = [j for j in job_ids if j not in out]
        if not asked:
            return out
        try:
            res = self.runner.run(self._status_command(asked), timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            self.no_answer = str(exc)
        else:
            if not self._status_failed(res):
                self.no_answer = None
                return {**out, **self._parse_status(res, asked)}
            self.no_answer = f"{res.command[0]} failed: {_said(res)}"
        return {**out, **{j: JobState.UNKNOWN for j in asked}}

    def _status_command(self, job_ids: list[str]) -> list[str]:  # pragma: no cover - abstract
        """The one command that asks for the state of all of ``job_ids``."""
        raise NotImplementedError

    def _status_failed(self, res: CommandResult) -> bool:
        """Whether the status command failed (every job UNKNOWN) rather than answered. By
        default any result is an answer (ps exits 1 when it lists none of the processes:
        they have ended); a scheduler whose query exits non-zero both when it no longer
        lists the jobs and when its controller is away tells the two apart here."""
        return False

    def _unreachable(self, res: CommandResult) -> bool:
        """Whether a failed command's answer says the scheduler could not be asked."""
        said = (res.stdout + res.stderr).lower()
        return any(w in said for w in self.unreachable_words)

    def _parse_status(self, res: CommandResult, job_ids: list[str]) -> dict[str, JobState]:  # pragma: no cover
        """The state of every job in ``job_ids`` from the status command's answer."""
        raise NotImplementedError

    def find_job(self, job: PilotJob) -> str | None:
        """The job that a submission of ``job`` which did not answer made, or None: by its
        job name here (the interactive protocol reads what its pilot's start wrote)."""
        return self.find_by_name(job.job_name)

    def find_by_name(self, name: str) -> str | None:
        """The id of a job named ``name`` the scheduler lists, or None when it lists none.
        :class:`~pwe.base.errors.SchedulerUnreachable` when the query got no answer (timed out,
        failed): then nobody can tell, and nothing may be submitted again yet."""
        try:
            res = self.runner.run(self._find_command(name), timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            raise SchedulerUnreachable(f"looking up {name}: {exc}", exc.command) from exc
        if self._status_failed(res):
            raise SchedulerUnreachable(f"looking up {name}: {res.command[0]} failed: {_said(res)}", res.command,
                                       res.status, res.stderr)
        return self._parse_find(res, name)

    def _find_command(self, name: str) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _parse_find(self, res: CommandResult, name: str) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def why_pending(self, job_ids: list[str]) -> dict[str, str]:
        """What the batch system says keeps each of ``job_ids`` waiting in its queue, in its
        own words (SLURM's pending reason, ``Resources``, ``Priority``, ``JobHeldUser``; PBS's
        comment; Grid Engine's scheduling info), for ``pwe explain``; a job it says nothing
        of is left out. Asked only on demand (never by the engine's poll); nothing when the
        scheduler does not answer (``no_answer`` then says why), or does not say."""
        asked = [j for j in job_ids if is_job_id(j)]
        command = self._pending_command(asked) if asked else None
        if command is None:
            return {}
        try:
            res = self.runner.run(command, timeout=self.timeout)
        except (CommandTimeout, ContactError) as exc:
            self.no_answer = str(exc)
            return {}
        if res.status != 0 and not res.stdout.strip():
            self.no_answer = f"{res.command[0]} failed: {_said(res)}"
            return {}
        said = self._parse_pending(res.stdout, asked)
        return {j: " ".join(w.split())[:300] for j, w in said.items() if j in asked and w.strip()}

    def _pending_command(self, job_ids: list[str]) -> list[str] | None:
        """The one command that asks why ``job_ids`` wait (None: this batch system cannot say)."""
        return None

    def _parse_pending(self, out: str, job_ids: list[str]) -> dict[str, str]:  # pragma: no cover - abstract
        """Job id -> the reason, from :meth:`_pending_command`'s answer."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the runner's connection."""
        self.runner.close()

    def cancel(self, job_ids: list[str]) -> None:
        """Ask the scheduler to end the jobs; whether it took, the next status poll shows
        (so a cancel that times out or cannot reach the host is not an error)."""
        job_ids = [j for j in job_ids if is_job_id(j)]
        if job_ids:
            try:
                self.runner.run(self.cancel_command + job_ids, timeout=self.timeout)
            except (CommandTimeout, ContactError):
                pass


def _one_line_each(job: PilotJob) -> None:
    """Every value of ``job`` that reaches its script or its scheduler's command line, one
    line each (the ``setup`` lines are the user's own shell, as written; an ``env`` value
    is quoted whole, line breaks and all, but never a NUL)."""
    from pwe.base.confine import one_line

    if isinstance(job.notify, str):
        raise TypeError("PilotJob.notify is a command's argv (a list), not a shell line")
    for name in ("pilot_id", "pilot_dir", "job_name", "python", "pythonpath", "partition", "account", "qos",
                 "reservation", "constraint", "parallel_environment"):
        one_line(getattr(job, name), f"pilot {job.pilot_id}: {name.replace('_', ' ')}")
    for what, words in (("argument", job.pilot_args), ("notify argument", job.notify or []),
                        ("env name", list(job.env))):
        for word in words:
            one_line(word, f"pilot {job.pilot_id}: {what}")
    for key, value in job.env.items():
        if "\0" in str(value):
            one_line(value, f"pilot {job.pilot_id}: env {key}")


#: what a batch system is given as a job's output file when it has no literal word for the
#: pilot's own (the job script then sends its output there itself)
NO_FILE = "/dev/null"


def output_files(job: PilotJob) -> tuple[str, str]:
    """Where the job's stdout and stderr land: the pilot directory's job.out and job.err
    (given to the batch system as :meth:`Protocol.streams` says, never in a directive line
    but LoadLeveler's, where a path with a space or a quote would be split or cut)."""
    return f"{job.pilot_dir}/job.out", f"{job.pilot_dir}/job.err"


def _said(res: CommandResult) -> str:
    """What a failed command said, for a message: its stderr, else its stdout, else its status."""
    return res.stderr.strip() or res.stdout.strip() or f"exit status {res.status}"
