"""The workflow model: what a YAML or XML workflow file means, as pydantic models.

Their validators and methods are plain functions and mixins in :mod:`pwe.workflow.rules`
(the standard library alone): the checker derived from these models (:mod:`pwe.base.checker`,
its table pwe/workflow/check_table.py, written by ``python -m pwe.workflow.schema``) runs the
same rules on the road to the first member without importing pydantic.

These models are the single definition of the format. The JSON Schema in
``schemas/workflow.schema.json`` is generated from them (``python -m pwe.workflow.schema``) and
``schemas/workflow.xsd`` describes the same model for the XML form.

Names follow DESIGN.md; the scheduling profile keeps the original PWE property names
verbatim (camelCase), so profiles written for PWE read unchanged. Walltimes are minutes.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Literal, Union

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
    model_validator,
)

from hostinfo.rules import one_line, one_word

from ..base.ids import IDENTIFIER_PATTERN, MAX_NAME, NODE_ID_PATTERN
from ..base.numbers import COUNT_MOST, MINUTES_MOST
from .rules import (container_image, image_text, module_name)
from .rules import (FileSpecMethods, HaltMethods, ProductMethods, RangeSpecMethods, RetryMethods,
                    SchedulingMethods, check_not_blank, failed_budget, finite_over_one, input_pattern, one_or_many,
                    param_kind, positive_core_hours, product_kind, range_step, retry_on, valid_start, run_not_blank,
                    scheduling_ranges, straggler_factor, validate_not_blank, function_spec, run_or_python)

#: A value a property or a parameter may take.
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]

#: A name of :data:`~pwe.base.ids.IDENTIFIER_PATTERN`'s form, at most :data:`MAX_NAME` characters.
Name = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=MAX_NAME)]
#: A node id (or the workflow's name), at most :data:`MAX_NAME` characters.
NodeId = Annotated[str, Field(pattern=NODE_ID_PATTERN, max_length=MAX_NAME)]

Minutes = Annotated[Union[StrictInt, StrictFloat], Field(gt=0, le=MINUTES_MOST, description="minutes")]
#: A count, a size in MB (pwe.base.numbers.COUNT_MOST at most: far above any machine).
Positive = Annotated[StrictInt, Field(ge=1, le=COUNT_MOST)]
NonNegative = Annotated[StrictInt, Field(ge=0, le=COUNT_MOST)]
Count = Positive


#: An item of ``inputs``: a path pattern relative to the workspace (:mod:`pwe.workflow.inputs`).
InputPattern = Annotated[StrictStr, Field(min_length=1), BeforeValidator(input_pattern)]

#: An item of setup_per_node: shell text (several lines are welcome: they run as one script).
SetupLine = Annotated[StrictStr, Field(min_length=1)]


#: Values that become batch directives (#SBATCH --account=...): a line break would start a
#: new line of the job script, i.e. run whatever follows it; a space or a leading '-' another option.
OptWord = Annotated[StrictStr | None, AfterValidator(one_word)]
OptLine = Annotated[StrictStr | None, AfterValidator(one_line)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scheduling(_Strict, SchedulingMethods):
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
    account: OptWord = Field(None, description="account / project charged")
    queue: OptWord = Field(None, description="partition or queue; overrides the host's choice")
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
    maxTotalMemory: Positive | None = Field(None, description="MB, whole job")
    minTotalMemory: Positive | None = Field(None, description="MB, whole job")
    nodeAttributes: OptWord = Field(None, description="node features / constraint expression")
    requestedStart: Annotated[StrictStr | None, AfterValidator(valid_start)] = Field(
        None, description="earliest start of its pilot jobs: ISO 8601 (2030-01-01T08:00, +02:00 or Z), yyyy/MM/dd "
        "HH:mm:ss, or now+N (s, min, h, d); a time with no zone is in the zone of the machine that reads it")
    stdout: OptLine = Field(None, description="batch job stdout path")
    stderr: OptLine = Field(None, description="batch job stderr path")
    stdin: OptLine = Field(None, description="batch job stdin path")
    # The rest of the profile: accepted and passed on where a batch system has them.
    memoryPerMember: Positive | None = Field(
        None, description="MB per member: members are packed by it, and one that uses more is killed (reason oom)")
    gpusPerMember: NonNegative | None = Field(None, description="GPUs per member")
    tmpPerMember: Positive | None = Field(
        None, description="MB of its own $TMPDIR per member, packed against each node's tmp pool")
    minNodes: Count | None = Field(None, description="fewest nodes per batch job")
    maxNodes: Count | None = Field(None, description="most nodes per batch job")
    qos: OptWord = Field(None, description="quality of service")
    reservation: OptWord = Field(None, description="advance reservation name")
    priority: Annotated[StrictInt, Field(ge=-COUNT_MOST, le=COUNT_MOST)] | None = Field(
        None, description="job priority / nice value")
    jobName: OptWord = Field(None, description="batch job name prefix")
    mailUser: OptWord = Field(None, description="address for batch system mail")
    mailOptions: OptWord = Field(None, description="when to send mail, in the scheduler's terms")

    _ranges = model_validator(mode="after")(scheduling_ranges)


class RangeSpec(_Strict, RangeSpecMethods):
    """``{range: [start, stop]}`` or ``{range: [start, stop, step]}``: stop excluded, like Python."""

    range: Annotated[list[Union[StrictInt, StrictFloat]], Field(min_length=2, max_length=3), AfterValidator(range_step)]


class FileSpec(_Strict, FileSpecMethods):
    """Values read from a file beside the workflow: a CSV column or a JSON-lines key."""

    file: Annotated[StrictStr, Field(min_length=1, description="CSV (.csv) or JSON lines (.jsonl, .ndjson)")]
    column: StrictStr | None = Field(None, description="CSV column or JSON key; default: the parameter's name")


ValuesList = Annotated[list[Scalar], Field(min_length=1)]


ParamSpec = Annotated[
    Union[
        Annotated[ValuesList, Tag("values")],
        Annotated[RangeSpec, Tag("range")],
        Annotated[FileSpec, Tag("file")],
    ],
    Discriminator(
        param_kind,
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


#: A growth factor: a finite number over 1 (1.5: half as much again; 2: twice as much).
Factor = Annotated[Union[StrictInt, StrictFloat], AfterValidator(finite_over_one)]


class Grow(_Strict):
    """``retry.grow``: each retry asks for this many times what the attempt before it asked."""

    memoryPerMember: Factor | None = Field(None, description="factor on memoryPerMember for each retry")
    maxWallTimePerMember: Factor | None = Field(None, description="factor on maxWallTimePerMember for each retry")
    cap: StrictBool | None = Field(None, description="a request grown past the largest node of the host (of all "
                                   "its partitions) runs at that node's size, instead of failing (Nextflow's "
                                   "resourceLimits)")


class Retry(_Strict, RetryMethods):
    """``retry:``: a failed attempt runs again, up to ``attempts`` in all, when why it ended is
    in ``on``; each retry asks for more by ``grow``."""

    attempts: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        description="most attempts of a member in all, the first included (1: no retry)")
    on: Annotated[Annotated[list[Union[StrictInt, StrictStr]], Field(min_length=1)] | None,
                  AfterValidator(retry_on)] = Field(
        None, description="why an attempt ended for it to be retried: oom (killed for memory), walltime (killed at "
        "maxWallTimePerMember), straggler (stopped far past its node's median: straggler:), invalid (exited 0, but a "
        "product is missing or short, or its validate failed), exit (any other failure), or exit statuses 0-255; "
        "default: any failure")
    grow: Grow | None = Field(None, description="what each retry asks for more of")


class Halt(_Strict, HaltMethods):
    """``halt:``, the failure budget: past it no new member starts."""

    failed: Annotated[Union[StrictInt, StrictStr], BeforeValidator(failed_budget)] = Field(
        description="how many failed members halt the run: a number (10) or a percentage of the members ('10%')")
    when: Literal["soon", "now"] = Field(
        "soon", description="soon: members running finish; now: they are stopped (recorded as halted, not failed)")


class Hold(_Strict):
    """``hold:``: a parameter value with ``after`` members failed and none done holds its
    members not yet started (state ``held``; pwe release lets them go)."""

    after: Count = Field(description="failed members of one value, none done, that hold the rest of that value")


class Budget(_Strict):
    """``budget:``: the core-hours a run may spend (pilots' cores x the time they hold them)."""

    coreHours: Annotated[Union[StrictInt, StrictFloat], AfterValidator(positive_core_hours)] = Field(
        description="most core-hours the run's pilots may hold, idle cores included")


class Straggler(_Strict):
    """``straggler:``: once ``after`` members of the node are done, a member running longer
    than ``factor`` times their median duration is stopped (reason ``straggler``) and
    retried as its retry policy says (GNU parallel's ``--timeout 200%``)."""

    factor: Annotated[Union[StrictInt, StrictFloat], AfterValidator(straggler_factor)] = Field(
        description="stop a member running past this many times the median duration of the members done (over 1)")
    after: Count = Field(
        20, description="members done before the median counts (default 20)")


MaxLosses = Annotated[StrictInt, Field(ge=1, le=1000)]


class Container(_Strict):
    """``container:``: each member runs inside this image (pilot/containers.py), with the
    workspace, the run directory and its $TMPDIR at the same paths and its environment
    passed; the image is checked once per pilot node (a node where it is not takes none of
    the members) and its content is part of the members' keys (pwe/planning/images.py)."""

    image: Annotated[StrictStr, AfterValidator(image_text)] = Field(
        description="charliecloud, apptainer: the image's path (a directory or an image file), relative to the "
        "workflow file's directory; podman: an image name of its store (localhost/sim:1)")
    runtime: Literal["charliecloud", "apptainer", "podman"] = Field(
        description="what runs it: charliecloud (ch-run), apptainer (apptainer exec) or podman (podman run)")

    _image = model_validator(mode="after")(container_image)


#: An item of ``modules:``: a module's name as the site's ``module load`` takes it (gcc/12).
ModuleName = Annotated[StrictStr, AfterValidator(module_name)]

#: The largest ``minBytes`` of a product (100 GB): a minimum past it is a slip of units, not a check.
MIN_BYTES_MOST = 10 ** 11


class Product(_Strict, ProductMethods):
    """An item of ``products:`` with what its file must hold to count: a product that exists
    but is empty (``nonEmpty``) or shorter than ``minBytes`` does not (pwe.planning.products)."""

    path: Annotated[StrictStr, Field(min_length=1)] = Field(
        description="the file, a path template relative to the workspace")
    nonEmpty: StrictBool = Field(False, description="the file must hold at least one byte")
    minBytes: Annotated[StrictInt, Field(ge=0, le=MIN_BYTES_MOST)] = Field(
        0, description="the file must hold at least this many bytes (at most 10^11)")


#: An item of ``products``: a path template, or a :class:`Product` mapping.
ProductSpec = Annotated[
    Union[
        Annotated[Annotated[StrictStr, Field(min_length=1)], Tag("text")],
        Annotated[Product, Tag("mapping")],
    ],
    Discriminator(
        product_kind,
        custom_error_type="product",
        custom_error_message="a product is a path template or {path: TEMPLATE, nonEmpty: true, minBytes: N}",
    ),
]


# DESIGN.md's key ``validate`` is also the name of pydantic's deprecated ``BaseModel.validate``,
# which pwe never calls: the field takes the name, and pydantic's warning that it does is no
# user's business (it would be a second line under a one-line error)
warnings.filterwarnings("ignore", message='Field name "validate" in "Node" shadows', category=UserWarning)


class Node(_Strict):
    """A node of the DAG: a payload, its dependencies and its parameters."""

    run: Annotated[StrictStr | None, Field(min_length=1, description="shell command; a jinja2 template (or python:)"),
                   AfterValidator(run_not_blank)] = None
    python: Annotated[StrictStr | None, Field(
        max_length=MAX_NAME * 4,
        description="a function member instead of run: package.module:function, called with the member's "
        "parameters as keyword arguments in a warm worker; its return value, a mapping of JSON values, is its "
        "outputs (pilot/pyworkers.py)"), AfterValidator(function_spec)] = None
    description: StrictStr | None = None
    after: Annotated[list[Annotated[StrictStr, Field(min_length=1)]], BeforeValidator(one_or_many)] = Field(
        default_factory=list, description="ids of the nodes this one waits for"
    )
    parameters: dict[Name, ParamSpec] = Field(
        default_factory=dict, description="name -> values; the node expands into one member per combination"
    )
    combine: Literal["product", "zip"] = Field("product", description="how parameters combine")
    retries: NonNegative | None = Field(None, description="reruns of a failed member, "
                                                                 "whatever its failure (retry: says more)")
    retry: Retry | None = Field(None, description="reruns by why an attempt failed, each asking for more "
                                "(default: defaults.retry)")
    maxLosses: MaxLosses | None = Field(None, description="a member running when its pilot or node was lost this "
                                        "many times is quarantined, not run again (default: defaults.maxLosses)")
    halt: Halt | None = Field(None, description="this node's failure budget: past it the run halts")
    straggler: Straggler | None = Field(None, description="stop and retry a member running far longer than the "
                                        "median of those done (default: defaults.straggler)")
    hold: Hold | None = Field(None, description="hold the members not yet started of a parameter value that only "
                              "fails (default: the workflow's hold)")
    host: StrictStr | None = Field(None, description="a host from the registry; default: defaults.host")
    env: dict[Name, Scalar] = Field(
        default_factory=dict, description="extra environment variables for every member"
    )
    scheduling: Scheduling | None = None
    setup_per_node: list[SetupLine] | None = Field(
        None, description="shell lines each pilot runs once on every node before the first member of this node "
        "there; a node where they fail takes none of its members (default: defaults.setup_per_node)")
    container: Container | None = Field(
        None, description="run each member inside this image (default: defaults.container)")
    modules: Annotated[list[ModuleName], Field(max_length=100)] | None = Field(
        None, description="environment modules loaded through the site's 'module' (Lmod or Environment Modules) "
        "once per pilot node before its first member of this node there; members get the environment they make; "
        "a node where one fails to load takes none of its members")
    resources: dict[Name, Positive] = Field(
        default_factory=dict, description="user-defined resources one member holds while it runs (e.g. license: 1); "
        "never more at once than the workflow's or the host's limits (pwe/planning/limits.py)"
    )
    check: Annotated[StrictStr | None, AfterValidator(check_not_blank)] = Field(
        None, description="iteration until convergence: a shell command (a jinja2 template) run after each member "
        "succeeds, in its directory with its environment; it appends 'converged=true' or 'next.NAME=VALUE' lines "
        "(one child; 'next.K.NAME=VALUE' for several) to $PWE_OUTPUTS")
    max_iterations: Positive | None = Field(
        None, description="most members from a root to a leaf of a checked node's tree (default 100); a member "
                          "there that asks for children ends its tree unconverged")

    group: Group | None = Field(None, description="run the members in groups, one after another in one pilot slot")
    products: Annotated[list[ProductSpec], Field(min_length=1)] | None = Field(
        None, description="files each member makes, path templates relative to the workspace (or {path, nonEmpty, "
        "minBytes}: what the file must hold to count): a member whose products all exist is complete and does not "
        "run; one that exits 0 without them fails (reason invalid) (pwe.planning.products)"
    )
    validate: Annotated[StrictStr | None, AfterValidator(validate_not_blank)] = Field(
        None, description="a shell command (a jinja2 template, rendered as run is) run after each member exits 0, "
        "in its directory with its environment, within its walltime: exit 0, the result is good; else the member "
        "fails (reason invalid) (pwe.planning.validate)")
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

    _payload = model_validator(mode="after")(run_or_python)


class Defaults(_Strict):
    """Values every node takes unless it sets its own."""

    host: StrictStr = "local"
    retries: NonNegative = 0
    retry: Retry | None = Field(None, description="reruns by why an attempt failed, each asking for more")
    maxLosses: MaxLosses = Field(2, description="a member running when its pilot or node was lost this many times "
                                 "is quarantined: not run again (pwe retry -q releases it)")
    straggler: Straggler | None = Field(None, description="stop and retry a member running far longer than the "
                                        "median of its node's members done")
    scheduling: Scheduling = Field(default_factory=Scheduling)
    setup_per_node: list[SetupLine] = Field(
        default_factory=list, description="shell lines each pilot runs once on every node before the first member "
        "there (staging a container image, warming a cache); a node where they fail takes no member")
    container: Container | None = Field(None, description="run every node's members inside this image")


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
    hold: Hold | None = Field(None, description="hold the members not yet started of a parameter value that only "
                              "fails: after N of them failed and none done")
    limits: dict[Name, Positive] = Field(
        default_factory=dict, description="most of each user-defined resource held at once in this run, e.g. "
        "license: 4 (nodes ask with 'resources')"
    )
