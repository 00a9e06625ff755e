"""The host registry's model: what pwe knows about each compute resource."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationInfo, field_validator, model_validator)

from pilot.allocation import check_node_name

Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]

#: An environment variable's name (what ``export NAME=...`` in a job script takes).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# The rules for values that reach a job script or a command line, shared with the
# workflow's scheduling profile (pwe.workflow.model): each is a pydantic after-validator.

def one_line(v):
    """A value that ends up in a job script line: a line break would add a script line."""
    if isinstance(v, str) and any(c in v for c in "\n\r\x00"):
        raise ValueError("must be one line (no line breaks)")
    return v


def one_word(v):
    """A value passed to a batch system as an option's value (``#SBATCH --account=V``, a
    queue, a job name): directives are split into words, and a word starting with '-' is
    read as another option."""
    one_line(v)
    if isinstance(v, str) and (not v or v.startswith("-") or any(c.isspace() for c in v)):
        raise ValueError(f"must be one word, not starting with '-' (it becomes a batch system option's value; "
                         f"got {v!r})")
    return v


def not_an_option(v):
    """A path given to ssh after an option (``-F PATH``)."""
    one_line(v)
    if isinstance(v, str) and v.startswith("-"):
        raise ValueError(f"must not start with '-' (got {v!r}; write ./{v} for a file so named)")
    return v


def variable_name(v):
    if not IDENTIFIER.fullmatch(v):
        raise ValueError(f"{v!r} is not a valid variable name (letters, digits and '_', not starting with a digit)")
    return v


def positive_finite(v):
    """A rate or a time: a number above 0, not NaN or infinite, at most :data:`MOST` (a
    mistake, not a setting: it would size a loop or a sleep)."""
    if not (v > 0 and v <= MOST):  # (NaN compares false both ways)
        raise ValueError(f"give a number above 0 and at most {MOST:g} (got {v!r})")
    return v


#: Pilot jobs per minute a host's lane submits by default (submit_rate): one every 3 s at most.
SUBMIT_RATE = 20.0
#: Refused submissions in a row (a bad account, a full queue) that stop a run (submit_failures).
SUBMIT_FAILURES = 3
#: Seconds an idle pilot keeps its nodes by default (idle_timeout): a batch job, one on this machine.
IDLE_TIMEOUT_BATCH = 60.0
IDLE_TIMEOUT_LOCAL = 300.0
#: The most pilots (max_pilots, max_queued_pilots) a host may allow; the largest rate or time.
MAX_PILOTS = 10000
MOST = 1e6

Word = Annotated[StrictStr, AfterValidator(one_word)]
NodeName = Annotated[StrictStr, AfterValidator(check_node_name)]


class Partition(BaseModel):
    """A partition (SLURM) or queue (PBS, LoadLeveler), in the host's priority order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Word
    max_walltime: Annotated[Union[StrictInt, StrictFloat], Field(gt=0)] | None = Field(None, description="minutes")
    max_nodes: Annotated[StrictInt, Field(ge=1)] | None = None
    # its nodes' resources, where they differ from the host's (None: the host's value);
    # pwe.planning.partitions.choose_partition picks the first partition whose walltime and these fit
    cores_per_node: Annotated[StrictInt, Field(ge=1)] | None = None
    gpus_per_node: Annotated[StrictInt, Field(ge=0)] | None = None
    memory_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="MB")
    tmp_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="MB")


# -- the host's core-hour budget (budget: {coreHours: N}; pwe/engine/budget.py keeps it) --
def _core_hours(v: Any) -> Any:
    if not (math.isfinite(v) and v > 0):
        raise ValueError("give a number of core-hours over 0")
    return v


class HostBudget(BaseModel):
    """``budget:`` of a host: the core-hours the run's pilots on it may hold, idle cores included."""

    model_config = ConfigDict(extra="forbid")
    coreHours: Annotated[Union[StrictInt, StrictFloat], AfterValidator(_core_hours)] = Field(
        description="most core-hours this host's pilots may hold in one run, idle cores included")


class Host(BaseModel):
    """One compute resource and how to reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr = ""
    protocol: StrictStr = Field("local", description="one of protocols.registry.NAMES")
    contact: StrictStr = Field("local", description="'local' (this machine) or ssh://user@login-node[:port]")
    cores_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="default: this machine's")
    gpus_per_node: Annotated[StrictInt, Field(ge=0)] = 0
    memory_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="MB of memory per node members may use; when given, members are packed by memoryPerMember")
    shared_nodes: StrictBool = True
    max_nodes: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="most nodes one pilot job asks for")
    max_pilots: Annotated[StrictInt, Field(ge=1, le=MAX_PILOTS)] = Field(
        1, description="most pilot jobs of a run on this host at once, queued and running together")
    max_queued_pilots: Annotated[StrictInt, Field(ge=1, le=MAX_PILOTS)] | None = Field(
        None, description="most of them waiting in the batch queue at once (default: max_pilots)")
    submit_rate: Annotated[StrictFloat, AfterValidator(positive_finite)] = Field(
        SUBMIT_RATE, description="most pilot jobs submitted a minute (spaced 60/submit_rate s apart)")
    idle_timeout: Annotated[StrictFloat, AfterValidator(positive_finite)] | None = Field(
        None, description="seconds a pilot with nothing to do keeps its nodes before it leaves (default: "
        f"{IDLE_TIMEOUT_BATCH:g} for a batch job, {IDLE_TIMEOUT_LOCAL:g} for a pilot on this machine)")
    submit_failures: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        SUBMIT_FAILURES, description="refused pilot submissions in a row (each after a growing back-off) that "
        "stop the run")
    nodes: list[NodeName] = Field(default_factory=list, description="explicit nodes the pilot fans out to over ssh")
    partitions: list[Partition] = Field(default_factory=list)
    account: Word | None = None
    parallel_environment: Word | None = Field(
        None, description="SGE: the parallel environment a pilot of more than one slot asks for (-pe PE SLOTS); "
        "qconf -spl lists the cell's")
    commands_dir: StrictStr | None = Field(
        None, description="the directory of the batch system's commands, where they are not first on the PATH "
        "(SGE's $SGE_ROOT/bin/lx-amd64 beside Torque's /usr/bin/qsub)")
    setup: list[StrictStr] = Field(default_factory=list, description="lines run before the pilot starts")
    scratch: StrictStr | None = Field(None, description="where each member's fresh $TMPDIR is made (else the "
                                      "node's $TMPDIR, else /tmp)")
    tmp_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="MB of $TMPDIR space per node members may use (tmpPerMember); default: the free space "
        "the pilot measures under the tmp root")
    env: dict[Annotated[StrictStr, AfterValidator(variable_name)], Scalar] = Field(default_factory=dict)
    launcher: Literal["auto", "fork", "srun", "ssh", "mpiexec"] = "auto"
    launcher_prefix: StrictStr | None = None
    ssh_config: StrictStr | None = Field(None, description="ssh client config file for contact and nodes")
    identity_file: StrictStr | None = Field(None, description="ssh key for the contact (else ssh-agent, ssh_config)")
    known_hosts: StrictStr | None = Field(None, description="known_hosts file checked besides ~/.ssh/known_hosts")
    accept_new_host_keys: StrictBool = Field(False, description="trust an unknown host key on first use (not advised)")
    transport: Literal["spool", "redis"] = Field("spool", description="how pilots' events reach the engine: files "
                                                 "in the run directory, or a Redis broker (redis)")
    broker: StrictStr | None = Field(None, description="redis://host:port/db, without its password")
    broker_password_file: StrictStr | None = Field(None, description="an owner-only file with the broker's password")
    connect_timeout: Annotated[Union[StrictInt, StrictFloat], Field(gt=0)] = 10
    shared_fs: StrictBool = Field(True, description="the host sees this machine's run directories at the same paths; "
                                  "false (with an ssh:// contact): the engine runs on the login node, the workflow and "
                                  "its inputs are staged there and the results brought back (pwe.engine.remote)")
    remote_dir: StrictStr = Field("pwe-remote", description="(shared_fs: false) where on the login node runs are "
                                  "staged, one directory per run; relative to the login directory")
    remote_pwe: Annotated[list[Annotated[StrictStr, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["pwe"], description="(shared_fs: false) the command that runs pwe on the login node, "
        "as a list: e.g. [/opt/pwe/bin/pwe], or [env, SLURM_CONF=/etc/slurm/other.conf, pwe]")
    properties: dict[StrictStr, Scalar] = Field(default_factory=dict)
    fallback: Literal["none", "local"] = Field(
        "none", description="'local': when the scheduler's commands are absent, warn and run the members here")
    limits: dict[Annotated[StrictStr, AfterValidator(variable_name)], Annotated[StrictInt, Field(ge=1)]] = Field(
        default_factory=dict, description="most of each user-defined resource (a node's 'resources') held at once "
        "by the members running on this host, e.g. license: 2")
    budget: HostBudget | None = Field(None, description="the core-hours one run may spend on this host "
                                      "(pwe/engine/budget.py), e.g. {coreHours: 500}")

    _lines = field_validator("scratch", "launcher_prefix", "remote_dir")(classmethod(lambda cls, v: one_line(v)))
    _paths = field_validator("ssh_config", "identity_file", "known_hosts")(classmethod(lambda cls, v: not_an_option(v)))

    @field_validator("max_queued_pilots")
    @classmethod
    def _queued(cls, v: int | None, info: ValidationInfo) -> int | None:
        most = info.data.get("max_pilots")
        if v is not None and most is not None and v > most:
            raise ValueError(f"max_queued_pilots ({v}) is more than max_pilots ({most}), which counts queued and "
                             f"running pilots together: give at most {most}, or raise max_pilots")
        return v

    @property
    def queued_most(self) -> int:
        """Most pilot jobs waiting in the batch queue at once (max_queued_pilots, else max_pilots)."""
        return self.max_queued_pilots or self.max_pilots

    def idle_after(self, batch: bool) -> float:
        """Seconds an idle pilot keeps its nodes (idle_timeout, else the default for its kind)."""
        if self.idle_timeout is not None:
            return float(self.idle_timeout)
        return IDLE_TIMEOUT_BATCH if batch else IDLE_TIMEOUT_LOCAL

    @field_validator("commands_dir")
    @classmethod
    def _commands_dir(cls, v: str | None) -> str | None:
        one_line(v)
        if v is not None and not v.startswith("/"):
            raise ValueError(f"commands_dir must be an absolute path (got {v!r})")
        return v

    @field_validator("nodes")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        seen = set()
        for name in v:
            if name in seen:
                raise ValueError(f"node {name!r} is listed twice")
            seen.add(name)
        return v

    @field_validator("contact")
    @classmethod
    def _contact_syntax(cls, v: str) -> str:
        one_line(v)
        if v == "local":
            return v
        if not v.startswith("ssh://"):
            raise ValueError(f"contact {v!r}: write 'local' or ssh://user@host")
        from protocols.ssh import split_contact

        try:
            split_contact(v)  # as the SSH runner reads it, so a run never meets a bad one
        except ValueError as exc:
            raise ValueError(f"contact {v!r}: {exc}") from None
        return v

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, v: str) -> str:
        from protocols.registry import UnknownProtocol, info

        try:
            info(v)  # the one list of protocols; an unknown name is one line with the known ones
        except UnknownProtocol as exc:  # pydantic takes a ValueError; hostinfo.registry adds file and line
            raise ValueError(exc.message) from None
        return v

    @field_validator("broker_password_file")
    @classmethod
    def _password_file(cls, v: str | None) -> str | None:
        return not_an_option(v)

    @field_validator("broker")
    @classmethod
    def _broker(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from pilot.broker import parse_url

        one_line(v)
        if parse_url(v)[4]:  # (parse_url: a ValueError saying how to write one) hosts files are shown and copied
            raise ValueError("broker: give the password in broker_password_file (an owner-only file), not in the URL")
        return v

    @model_validator(mode="after")
    def _contact(self) -> "Host":
        if not self.shared_fs and self.contact == "local":
            raise ValueError("shared_fs: false needs a login node to stage to: give contact: ssh://user@login-node")
        if self.transport == "redis" and not self.broker:
            raise ValueError("transport redis needs broker: redis://host:port/db")
        from protocols.registry import PROTOCOLS

        if self.contact != "local" and not PROTOCOLS[self.protocol].remote:
            remote = ", ".join(n for n, p in PROTOCOLS.items() if p.remote)
            raise ValueError(f"protocol {self.protocol} runs on this machine (contact local); for a remote head node "
                             f"use a protocol that submits there: {remote}")
        return self


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: dict[StrictStr, Host] = Field(default_factory=dict)
