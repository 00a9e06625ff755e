"""The host registry's model: what pwe knows about each compute resource.

The validators and methods are plain functions and mixins in :mod:`hostinfo.rules` (the
standard library alone), so the checker derived from these models
(:mod:`pwe.base.checker`, its table hostinfo/check_table.py) runs the same rules without
pydantic."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      model_validator)

from pilot.allocation import check_node_name
from pwe.base.numbers import COUNT_MOST, MINUTES_MOST

from .rules import (IDLE_TIMEOUT_BATCH, IDLE_TIMEOUT_LOCAL, MAX_PILOTS, MOST, SUBMIT_FAILURES,
                    SUBMIT_RATE, HostMethods, absolute_path, broker_url, contact_syntax, core_hours, distinct,
                    host_contact, known_protocol, not_an_option, one_line, one_word, positive_finite,
                    queued_within, variable_name)

Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]
#: A count, a size in MB (pwe.base.numbers.COUNT_MOST at most: far above any machine).
Positive = Annotated[StrictInt, Field(ge=1, le=COUNT_MOST)]
NonNegative = Annotated[StrictInt, Field(ge=0, le=COUNT_MOST)]

Word = Annotated[StrictStr, AfterValidator(one_word)]
OptLine = Annotated[StrictStr | None, AfterValidator(one_line)]
#: a path given to ssh after an option (-F PATH): not one that reads as an option
OptPath = Annotated[StrictStr | None, AfterValidator(not_an_option)]
NodeName = Annotated[StrictStr, AfterValidator(check_node_name)]


class Partition(BaseModel):
    """A partition (SLURM) or queue (PBS, LoadLeveler), in the host's priority order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Word
    max_walltime: Annotated[Union[StrictInt, StrictFloat], Field(gt=0, le=MINUTES_MOST)] | None = Field(
        None, description="minutes")
    max_nodes: Positive | None = None
    # its nodes' resources, where they differ from the host's (None: the host's value);
    # pwe.planning.partitions.choose_partition picks the first partition whose walltime and these fit
    cores_per_node: Positive | None = None
    gpus_per_node: NonNegative | None = None
    memory_per_node: Positive | None = Field(None, description="MB")
    tmp_per_node: Positive | None = Field(None, description="MB")


class HostBudget(BaseModel):
    """``budget:`` of a host: the core-hours the run's pilots on it may hold, idle cores included."""

    model_config = ConfigDict(extra="forbid")
    coreHours: Annotated[Union[StrictInt, StrictFloat], AfterValidator(core_hours)] = Field(
        description="most core-hours this host's pilots may hold in one run, idle cores included")


class Host(BaseModel, HostMethods):
    """One compute resource and how to reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr = ""
    protocol: Annotated[StrictStr, AfterValidator(known_protocol)] = (
        Field("local", description="one of protocols.registry.NAMES"))
    contact: Annotated[StrictStr, AfterValidator(contact_syntax)] = (
        Field("local", description="'local' (this machine) or ssh://user@login-node[:port]"))
    cores_per_node: Positive | None = Field(None, description="default: this machine's")
    gpus_per_node: NonNegative = 0
    memory_per_node: Positive | None = Field(
        None, description="MB of memory per node members may use; when given, members are packed by memoryPerMember")
    shared_nodes: StrictBool = True
    max_nodes: Positive | None = Field(None, description="most nodes one pilot job asks for")
    max_pilots: Annotated[StrictInt, Field(ge=1, le=MAX_PILOTS)] = Field(
        1, description="most pilot jobs of a run on this host at once, queued and running together")
    max_queued_pilots: Annotated[Annotated[StrictInt, Field(ge=1, le=MAX_PILOTS)] | None,
                                 AfterValidator(queued_within)] = Field(
        None, description="most of them waiting in the batch queue at once (default: max_pilots)")
    submit_rate: Annotated[StrictFloat, AfterValidator(positive_finite)] = Field(
        SUBMIT_RATE, description="most pilot jobs submitted a minute (spaced 60/submit_rate s apart)")
    idle_timeout: Annotated[StrictFloat, AfterValidator(positive_finite)] | None = Field(
        None, description="seconds a pilot with nothing to do keeps its nodes before it leaves (default: "
        f"{IDLE_TIMEOUT_BATCH:g} for a batch job, {IDLE_TIMEOUT_LOCAL:g} for a pilot on this machine)")
    submit_failures: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        SUBMIT_FAILURES, description="refused pilot submissions in a row (each after a growing back-off) that "
        "stop the run")
    nodes: Annotated[list[NodeName], AfterValidator(distinct)] = (
        Field(default_factory=list, description="explicit nodes the pilot fans out to over ssh"))
    partitions: list[Partition] = Field(default_factory=list)
    account: Word | None = None
    parallel_environment: Word | None = Field(
        None, description="SGE: the parallel environment a pilot of more than one slot asks for (-pe PE SLOTS); "
        "qconf -spl lists the cell's")
    commands_dir: Annotated[StrictStr | None, AfterValidator(absolute_path)] = Field(
        None, description="the directory of the batch system's commands, where they are not first on the PATH "
        "(SGE's $SGE_ROOT/bin/lx-amd64 beside Torque's /usr/bin/qsub)")
    setup: list[StrictStr] = Field(default_factory=list, description="lines run before the pilot starts")
    scratch: OptLine = Field(None, description="where each member's fresh $TMPDIR is made (else the "
                                      "node's $TMPDIR, else /tmp)")
    tmp_per_node: Positive | None = Field(
        None, description="MB of $TMPDIR space per node members may use (tmpPerMember); default: the free space "
        "the pilot measures under the tmp root")
    env: dict[Annotated[StrictStr, AfterValidator(variable_name)], Scalar] = Field(default_factory=dict)
    launcher: Literal["auto", "fork", "srun", "ssh", "mpiexec"] = "auto"
    launcher_prefix: OptLine = None
    ssh_config: OptPath = Field(None, description="ssh client config file for contact and nodes")
    identity_file: OptPath = Field(None, description="ssh key for the contact (else ssh-agent, ssh_config)")
    known_hosts: OptPath = Field(None, description="known_hosts file checked besides ~/.ssh/known_hosts")
    accept_new_host_keys: StrictBool = Field(False, description="trust an unknown host key on first use (not advised)")
    transport: Literal["spool", "redis"] = Field("spool", description="how pilots' events reach the engine: files "
                                                 "in the run directory, or a Redis broker (redis)")
    broker: Annotated[StrictStr | None, AfterValidator(broker_url)] = (
        Field(None, description="redis://host:port/db, without its password"))
    broker_password_file: OptPath = Field(None, description="an owner-only file with the broker's password")
    connect_timeout: Annotated[Union[StrictInt, StrictFloat], Field(gt=0, le=MOST)] = 10
    shared_fs: StrictBool = Field(True, description="the host sees this machine's run directories at the same paths; "
                                  "false (with an ssh:// contact): the engine runs on the login node, the workflow and "
                                  "its inputs are staged there and the results brought back (pwe.engine.remote)")
    remote_dir: Annotated[StrictStr, AfterValidator(one_line)] = Field(
        "pwe-remote", description="(shared_fs: false) where on the login node runs are staged, one directory per "
        "run; relative to the login directory")
    remote_pwe: Annotated[list[Annotated[StrictStr, Field(min_length=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: ["pwe"], description="(shared_fs: false) the command that runs pwe on the login node, "
        "as a list: e.g. [/opt/pwe/bin/pwe], or [env, SLURM_CONF=/etc/slurm/other.conf, pwe]")
    properties: dict[StrictStr, Scalar] = Field(default_factory=dict)
    fallback: Literal["none", "local"] = Field(
        "none", description="'local': when the scheduler's commands are absent, warn and run the members here")
    limits: dict[Annotated[StrictStr, AfterValidator(variable_name)], Positive] = Field(
        default_factory=dict, description="most of each user-defined resource (a node's 'resources') held at once "
        "by the members running on this host, e.g. license: 2")
    budget: HostBudget | None = Field(None, description="the core-hours one run may spend on this host "
                                      "(pwe/engine/budget.py), e.g. {coreHours: 500}")

    _contact = model_validator(mode="after")(host_contact)


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: dict[StrictStr, Host] = Field(default_factory=dict)
