"""The workflow model: what a YAML or XML workflow file means, as pydantic models.

These models are the single definition of the format. The JSON Schema in
``schemas/workflow.schema.json`` is generated from them (``python -m pwe.workflow.schema``) and
``schemas/workflow.xsd`` describes the same model for the XML form.

Names follow DESIGN.md; the scheduling profile keeps the original PWE property names
verbatim (camelCase), so profiles written for PWE read unchanged. Walltimes are minutes.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

from hostinfo.model import one_line, one_word

from ..base.ids import IDENTIFIER_PATTERN, MAX_NAME, NODE_ID_PATTERN
from .inputs import pattern_problem

#: A value a property or a parameter may take.
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]

#: A name of :data:`~pwe.base.ids.IDENTIFIER_PATTERN`'s form, at most :data:`MAX_NAME` characters.
Name = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=MAX_NAME)]
#: A node id (or the workflow's name), at most :data:`MAX_NAME` characters.
NodeId = Annotated[str, Field(pattern=NODE_ID_PATTERN, max_length=MAX_NAME)]

Minutes = Annotated[Union[StrictInt, StrictFloat], Field(gt=0, description="minutes")]
Count = Annotated[StrictInt, Field(ge=1)]


def _input_pattern(v: Any) -> Any:
    # what is staged must come from the workspace: refused here, at validate, not when staging
    # (before the type's own checks, so that '' gets this message too; not text: StrictStr's)
    why = pattern_problem(v) if isinstance(v, str) else None
    if why:
        raise ValueError(f"the pattern {why}")
    return v


#: An item of ``inputs``: a path pattern relative to the workspace (:mod:`pwe.workflow.inputs`).
InputPattern = Annotated[StrictStr, Field(min_length=1), BeforeValidator(_input_pattern)]

#: An item of setup_per_node: shell text (several lines are welcome: they run as one script).
SetupLine = Annotated[StrictStr, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scheduling(_Strict):
    """The scheduling profile, with the original PWE ``<scheduling>`` property names.

    Every name is accepted; a protocol passes on what its batch system understands and
    reports the rest as unsupported at plan time (never drops one silently). A name not
    in this list is an error with a "did you mean".
    """

    submissionType: Literal["glidein", "batch", "interactive"] | None = Field(
        None, description="glidein: members run inside pilot jobs (default); interactive: on the host's head node "
        "(what hosts with protocol local or ssh do); batch: one job per member (not built: reported, and the "
        "members run in pilot jobs)"
    )
    account: StrictStr | None = Field(None, description="account / project charged")
    queue: StrictStr | None = Field(None, description="partition or queue; overrides the host's choice")
    maxWallTime: Minutes | None = Field(None, description="walltime of one batch job (pilot), minutes")
    minWallTime: Minutes | None = Field(None, description="shortest acceptable pilot walltime, minutes")
    maxWallTimePerMember: Minutes | None = Field(None, description="longest one member may run, minutes")
    minWallTimePerMember: Minutes | None = Field(None, description="shortest one member runs, minutes")
    maxCpus: Count | None = Field(None, description="most cores one batch job may ask for")
    minCpus: Count | None = Field(None, description="fewest cores one batch job may ask for")
    ranksPerMember: Count | None = Field(None, description="processes (MPI ranks) per member; default 1")
    threadsPerRank: Count | None = Field(None, description="threads per rank; default 1")
    ranksPerNode: Count | None = Field(
        None, description="ranks of a member on each of its nodes (ranksPerMember must be a multiple): the member "
        "spans ranksPerMember / ranksPerNode nodes; default: packed onto as few nodes as have room")
    maxMembers: Count | None = Field(None, description="most members one pilot runs")
    coreUsageRule: Count | None = Field(None, description="most cores used on each node")
    shareNodes: StrictBool | None = Field(
        None, description="true: fill a node's unused cores with other members; false: a node per member"
    )
    maxTotalMemory: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="MB, whole job")
    minTotalMemory: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="MB, whole job")
    nodeAttributes: StrictStr | None = Field(None, description="node features / constraint expression")
    requestedStart: StrictStr | None = Field(
        None, description="earliest start of its pilot jobs: ISO 8601 (2030-01-01T08:00, +02:00 or Z), yyyy/MM/dd "
        "HH:mm:ss, or now+N (s, min, h, d); a time with no zone is in the zone of the machine that reads it")
    stdout: StrictStr | None = Field(None, description="batch job stdout path")
    stderr: StrictStr | None = Field(None, description="batch job stderr path")
    stdin: StrictStr | None = Field(None, description="batch job stdin path")
    # The rest of the profile: accepted and passed on where a batch system has them.
    memoryPerMember: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="MB per member: members are packed by it, and one that uses more is killed (reason oom)")
    gpusPerMember: Annotated[StrictInt, Field(ge=0)] | None = Field(None, description="GPUs per member")
    tmpPerMember: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="MB of its own $TMPDIR per member, packed against each node's tmp pool")
    minNodes: Count | None = Field(None, description="fewest nodes per batch job")
    maxNodes: Count | None = Field(None, description="most nodes per batch job")
    qos: StrictStr | None = Field(None, description="quality of service")
    reservation: StrictStr | None = Field(None, description="advance reservation name")
    priority: StrictInt | None = Field(None, description="job priority / nice value")
    jobName: StrictStr | None = Field(None, description="batch job name prefix")
    mailUser: StrictStr | None = Field(None, description="address for batch system mail")
    mailOptions: StrictStr | None = Field(None, description="when to send mail, in the scheduler's terms")

    # these become batch directives (#SBATCH --account=...): a line break would start a new
    # line of the job script, i.e. run whatever follows it; a space or a leading '-' another option
    _words = field_validator("account", "queue", "qos", "reservation", "nodeAttributes", "jobName", "mailUser",
                             "mailOptions")(classmethod(lambda cls, v: one_word(v)))
    _lines = field_validator("stdout", "stderr", "stdin")(classmethod(lambda cls, v: one_line(v)))

    @field_validator("requestedStart")
    @classmethod
    def _start(cls, v: str | None) -> str | None:
        if v is not None:
            from . import starttime

            starttime.parse(one_line(v))  # refused here, at validate, not at the first submission
        return v

    def requested_start(self, now: Any = None) -> Any:
        """The earliest start of this node's pilot jobs (an aware datetime), or None;
        ``now``: when a ``now+`` delay counts from (the run's creation)."""
        if self.requestedStart is None:
            return None
        from . import starttime

        return starttime.parse(self.requestedStart, now)

    @model_validator(mode="after")
    def _ranges(self) -> "Scheduling":
        for lo, hi in (
            ("minWallTime", "maxWallTime"),
            ("minWallTimePerMember", "maxWallTimePerMember"),
            ("minCpus", "maxCpus"),
            ("minTotalMemory", "maxTotalMemory"),
            ("minNodes", "maxNodes"),
        ):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                raise ValueError(f"{lo} ({a}) is larger than {hi} ({b})")
        if self.ranksPerNode is not None and (self.ranksPerMember or 1) % self.ranksPerNode:
            raise ValueError(f"ranksPerMember ({self.ranksPerMember or 1}) is not a multiple of ranksPerNode "
                             f"({self.ranksPerNode}): a member's ranks must divide evenly over its nodes")
        return self

    def cores_per_member(self) -> int:
        return (self.ranksPerMember or 1) * (self.threadsPerRank or 1)

    def merged(self, override: "Scheduling | None") -> "Scheduling":
        """This profile with every field that ``override`` sets replaced."""
        if override is None:
            return self
        values = self.model_dump(exclude_none=True)
        values.update(override.model_dump(exclude_none=True))
        return Scheduling(**values)


class RangeSpec(_Strict):
    """``{range: [start, stop]}`` or ``{range: [start, stop, step]}``: stop excluded, like Python."""

    range: Annotated[list[Union[StrictInt, StrictFloat]], Field(min_length=2, max_length=3)]

    @field_validator("range")
    @classmethod
    def _step(cls, v: list) -> list:
        if not all(math.isfinite(x) for x in v):
            raise ValueError(f"the start, stop and step of a range must be finite numbers (got {v})")
        if len(v) == 3 and v[2] == 0:
            raise ValueError("the step of a range cannot be 0")
        step = v[2] if len(v) == 3 else 1
        if (v[1] - v[0]) * step <= 0:
            raise ValueError(f"range {v} is empty (stop is excluded; a step must go from start toward stop)")
        return v


class FileSpec(_Strict):
    """Values read from a file beside the workflow: a CSV column or a JSON-lines key."""

    file: Annotated[StrictStr, Field(min_length=1, description="CSV (.csv) or JSON lines (.jsonl, .ndjson)")]
    column: StrictStr | None = Field(None, description="CSV column or JSON key; default: the parameter's name")


ValuesList = Annotated[list[Scalar], Field(min_length=1)]


def _param_kind(v: Any) -> str | None:
    if isinstance(v, list):
        return "values"
    if isinstance(v, dict):
        if "range" in v:
            return "range"
        if "file" in v:
            return "file"
    if isinstance(v, BaseModel):
        return "range" if isinstance(v, RangeSpec) else "file"
    return None


ParamSpec = Annotated[
    Union[
        Annotated[ValuesList, Tag("values")],
        Annotated[RangeSpec, Tag("range")],
        Annotated[FileSpec, Tag("file")],
    ],
    Discriminator(
        _param_kind,
        custom_error_type="parameter_values",
        custom_error_message="a parameter's values are a list, {range: [start, stop(, step)]} or "
        "{file: PATH, column: NAME}",
    ),
]


class Group(_Strict):
    """``group:`` (Row's ``action.group``): the node's members handed to a pilot slot in
    groups, each group's members run one after another there (:mod:`pwe.planning.groups`)."""

    include: list[Annotated[StrictStr, Field(min_length=1)]] | None = Field(
        None, description="conditions over the member's parameters (pwe show -q's language, e.g. 'T>300; seed<5'); "
        "a member is grouped when any one of them holds (each one's ';'-joined parts all); the others run ungrouped. "
        "Default: every member")
    sort_by: list[Annotated[StrictStr, Field(pattern=IDENTIFIER_PATTERN, max_length=MAX_NAME)]] = Field(
        default_factory=list, description="parameter names: members are ordered by them (then by index)")
    reverse_sort: StrictBool = Field(False, description="sort descending")
    split_by_sort_key: StrictBool = Field(False, description="a new group wherever the sort key changes")
    maximum_size: Count | None = Field(None, description="most members in a group (the rest: further groups)")
    submit_whole: StrictBool = Field(False, description="hand a group out only when none of its members still "
                                     "waits for its dependencies")


#: Why a member's attempt ended, where it was not its own exit (pilot/wire.py's REASON_*):
#: the ones a ``retry: {on: [...]}`` may name besides exit statuses. ``exit`` is any other
#: failure (a non-zero exit status).
RETRY_REASONS = ("oom", "walltime", "exit")


def _finite_over_one(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and 1 < v <= 100):
        raise ValueError("a growth factor multiplies the request on each retry: give a number over 1, at most 100")
    return v


#: A growth factor: a finite number over 1 (1.5: half as much again; 2: twice as much).
Factor = Annotated[Union[StrictInt, StrictFloat], AfterValidator(_finite_over_one)]


class Grow(_Strict):
    """``retry.grow``: each retry asks for this many times what the attempt before it asked."""

    memoryPerMember: Factor | None = Field(None, description="factor on memoryPerMember for each retry")
    maxWallTimePerMember: Factor | None = Field(None, description="factor on maxWallTimePerMember for each retry")


class Retry(_Strict):
    """``retry:``: a failed attempt runs again, up to ``attempts`` in all, when why it ended is
    in ``on``; each retry asks for more by ``grow``."""

    attempts: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        description="most attempts of a member in all, the first included (1: no retry)")
    on: Annotated[list[Union[StrictInt, StrictStr]], Field(min_length=1)] | None = Field(
        None, description="why an attempt ended for it to be retried: oom (killed for memory), walltime (killed at "
        "maxWallTimePerMember), exit (any other failure), or exit statuses 0-255; default: any failure")
    grow: Grow | None = Field(None, description="what each retry asks for more of")

    @field_validator("on")
    @classmethod
    def _on(cls, v: list | None) -> list | None:
        for item in v or ():
            if isinstance(item, int):
                if not 0 <= item <= 255:
                    raise ValueError(f"an exit status in 'on' is 0-255, not {item}")
            elif item not in RETRY_REASONS:
                raise ValueError(f"'on' takes {', '.join(RETRY_REASONS)} or exit statuses 0-255 (got {item!r})")
        return v

    def retries(self, reason: str, rc: int) -> bool:
        """Whether an attempt that ended so (``reason``: oom, walltime or exit; ``rc``) is retried."""
        return self.on is None or reason in self.on or (reason == "exit" and rc in self.on)


_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


def _failed(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("give a number of failed members (e.g. 10) or a percentage of them (e.g. '10%')")
    if isinstance(v, int):
        if v < 1:
            raise ValueError("'failed' is how many failed members halt the run: give 1 or more")
        return v
    if isinstance(v, str):
        m = _PERCENT.match(v)
        if m is None:
            raise ValueError(f"'failed' takes a number of members (e.g. 10) or a percentage (e.g. '10%'), not {v!r}")
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError("a percentage of failed members is over 0% and at most 100%")
        return v
    raise ValueError("give a number of failed members (e.g. 10) or a percentage of them (e.g. '10%')")


class Halt(_Strict):
    """``halt:``, the failure budget: past it no new member starts."""

    failed: Annotated[Union[StrictInt, StrictStr], BeforeValidator(_failed)] = Field(
        description="how many failed members halt the run: a number (10) or a percentage of the members ('10%')")
    when: Literal["soon", "now"] = Field(
        "soon", description="soon: members running finish; now: they are stopped (recorded as halted, not failed)")

    def limit(self, members: int) -> int:
        """The failures that halt a run (or node) of ``members`` members: the number, or the
        percentage of them rounded up (at least 1)."""
        if isinstance(self.failed, int):
            return self.failed
        pct = float(self.failed.strip().rstrip("%"))
        return max(1, math.ceil(pct * members / 100 - 1e-9))

    def shown(self) -> str:
        return self.failed.strip() if isinstance(self.failed, str) else str(self.failed)


def _positive_finite(v: Any) -> Any:
    if not (math.isfinite(v) and v > 0):
        raise ValueError("give a number of core-hours over 0")
    return v


class Budget(_Strict):
    """``budget:``: the core-hours a run may spend (pilots' cores x the time they hold them)."""

    coreHours: Annotated[Union[StrictInt, StrictFloat], AfterValidator(_positive_finite)] = Field(
        description="most core-hours the run's pilots may hold, idle cores included")


MaxLosses = Annotated[StrictInt, Field(ge=1, le=1000)]


class Node(_Strict):
    """A node of the DAG: a payload, its dependencies and its parameters."""

    run: Annotated[StrictStr, Field(min_length=1, description="shell command; a jinja2 template")]
    description: StrictStr | None = None
    after: list[Annotated[StrictStr, Field(min_length=1)]] = Field(
        default_factory=list, description="ids of the nodes this one waits for"
    )
    parameters: dict[Name, ParamSpec] = Field(
        default_factory=dict, description="name -> values; the node expands into one member per combination"
    )
    combine: Literal["product", "zip"] = Field("product", description="how parameters combine")
    retries: Annotated[StrictInt, Field(ge=0)] | None = Field(None, description="reruns of a failed member, "
                                                                 "whatever its failure (retry: says more)")
    retry: Retry | None = Field(None, description="reruns by why an attempt failed, each asking for more "
                                "(default: defaults.retry)")
    maxLosses: MaxLosses | None = Field(None, description="a member running when its pilot or node was lost this "
                                        "many times is quarantined, not run again (default: defaults.maxLosses)")
    halt: Halt | None = Field(None, description="this node's failure budget: past it the run halts")
    host: StrictStr | None = Field(None, description="a host from the registry; default: defaults.host")
    env: dict[Name, Scalar] = Field(
        default_factory=dict, description="extra environment variables for every member"
    )
    scheduling: Scheduling | None = None
    setup_per_node: list[SetupLine] | None = Field(
        None, description="shell lines each pilot runs once on every node before the first member of this node "
        "there; a node where they fail takes none of its members (default: defaults.setup_per_node)")
    resources: dict[Name, Annotated[StrictInt, Field(ge=1)]] = Field(
        default_factory=dict, description="user-defined resources one member holds while it runs (e.g. license: 1); "
        "never more at once than the workflow's or the host's limits (pwe/planning/limits.py)"
    )
    check: StrictStr | None = Field(
        None, description="iteration until convergence: a shell command (a jinja2 template) run after each member "
        "succeeds, in its directory with its environment; it appends 'converged=true' or 'next.NAME=VALUE' lines "
        "(one child; 'next.K.NAME=VALUE' for several) to $PWE_OUTPUTS")
    max_iterations: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="most members from a root to a leaf of a checked node's tree (default 100); a member "
                          "there that asks for children ends its tree unconverged")

    group: Group | None = Field(None, description="run the members in groups, one after another in one pilot slot")
    products: Annotated[list[Annotated[StrictStr, Field(min_length=1)]], Field(min_length=1)] | None = Field(
        None, description="files each member makes, path templates relative to the workspace: a member whose "
        "products all exist is complete and does not run (pwe.planning.products)"
    )
    directory: Literal["own", "shared"] | None = Field(
        None, description="where each member runs: own (a directory of its own, members/<node>/<index // 1000>/"
        "<index>, removed when it ended if it left nothing) or shared (the node's directory, members/<node>, made "
        "once: no directory per member); default: own for a node with products, shared for the others "
        "(pwe.runstate.rundir.member_path)"
    )
    inputs: Annotated[list[Annotated[StrictStr, Field(min_length=1)]], Field(min_length=1)] | None = Field(
        None, description="files each member reads, path templates relative to the workspace: their content is part "
        "of the member's key, so a member whose inputs changed is not reused (pwe.planning.reuse)"
    )
    reuse: StrictBool | None = Field(
        None, description="reuse an unchanged member's result from an earlier run of the workflow (default true); "
        "false for a command that is not deterministic (pwe.planning.reuse)"
    )

    @field_validator("check")
    @classmethod
    def _check_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("the check is blank; 'check' needs a command")
        return v

    @field_validator("after", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("run")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the payload is blank; 'run' needs a command")
        return v


class Defaults(_Strict):
    """Values every node takes unless it sets its own."""

    host: StrictStr = "local"
    retries: Annotated[StrictInt, Field(ge=0)] = 0
    retry: Retry | None = Field(None, description="reruns by why an attempt failed, each asking for more")
    maxLosses: MaxLosses = Field(2, description="a member running when its pilot or node was lost this many times "
                                 "is quarantined: not run again (pwe retry -q releases it)")
    scheduling: Scheduling = Field(default_factory=Scheduling)
    setup_per_node: list[SetupLine] = Field(
        default_factory=list, description="shell lines each pilot runs once on every node before the first member "
        "there (staging a container image, warming a cache); a node where they fail takes no member")


class Workflow(_Strict):
    """A whole workflow file."""

    name: Annotated[StrictStr, Field(pattern=NODE_ID_PATTERN, max_length=MAX_NAME,
                                      description="letters, digits, '_', '.', '-'; at most 100 characters")]
    description: StrictStr | None = None
    properties: dict[Name, Scalar] = Field(
        default_factory=dict, description="values every payload template may use"
    )
    defaults: Defaults = Field(default_factory=Defaults)
    workspace: Annotated[StrictStr, Field(min_length=1)] | None = Field(
        None, description="the directory products are relative to (PWE_WORKSPACE); relative to the workflow "
        "file's directory; default: that directory (pwe run --workspace overrides)"
    )
    inputs: list[InputPattern] = Field(
        default_factory=list, description="files a run needs, staged to a host whose file systems are not shared "
        "(shared_fs: false): path patterns relative to the workspace (glob: *, ?, [...], ** for any depth); a "
        "directory means every file under it (pwe.workflow.inputs)"
    )
    nodes: Annotated[dict[NodeId, Node], Field(min_length=1)]
    # (issue 14: the order ready members are handed out in, and limits on user resources)
    order: Literal["pressure", "fifo"] = Field(
        "pressure", description="pressure: ready members of the nodes with the longest estimated time to the end of "
        "the run first (pwe/runstate/pressure.py); fifo: in the order they became ready"
    )
    halt: Halt | None = Field(None, description="the failure budget: past it no new member starts (pwe run --halt)")
    budget: Budget | None = Field(None, description="the core-hours the run may spend")
    limits: dict[Name, Annotated[StrictInt, Field(ge=1)]] = Field(
        default_factory=dict, description="most of each user-defined resource held at once in this run, e.g. "
        "license: 4 (nodes ask with 'resources')"
    )
