"""The plan: a validated workflow expanded (arithmetically) into members and edges.

Why one module over 450 lines: it is the plan's records (:class:`Edge`,
:class:`PlannedNode`, :class:`Plan`) with the one function that makes them,
:func:`build_plan`, and its checks: a helper for each part of a node (its ``after`` edges,
parameters, templates, scheduling, retry) that names the line of the file at fault, so a
field of a planned node is added here with its check. What needs the hosts or the
workspace is apart (:mod:`pwe.planning.placement`, :mod:`pwe.planning.products`).

``build_plan`` is where the checks that need the whole workflow happen: the DAG
(unknown and self dependencies, cycles with their path), parameter files, zip lengths,
template names, and the member-matching rule of each edge.

Member matching (DESIGN.md): for an edge A -> B, a member of B waits for the members of
A whose values agree with it on the parameter names A and B share; none shared means a
barrier. :meth:`Plan.upstream` and :meth:`Plan.downstream` answer it per member without
comparing members pairwise (see :meth:`pwe.planning.params.ParameterSpace.matching`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from . import functions, images, products, reuse
from .dag import Graph
from ..base.errors import InputError, TemplateError, WorkflowGraphError, WorkflowSchemaError
from ..workflow.load import load_workflow
from .params import MAX_MEMBERS, ParameterSpace, RangeValues, Values, read_values
from .validate import after_member, compiled as validate_template
from ..base.source import LineDict, did_you_mean, locate, value_text
from ..workflow.rules import FileSpecMethods
from ..workflow.templates import PathTemplate, PayloadTemplate, TemplateSyntax, error_text

if TYPE_CHECKING:
    from ..workflow import model  # (the records pwe.workflow.records makes have its attributes)


@dataclass
class Edge:
    """A -> B, matched on the parameter names both have (empty: a barrier)."""

    src: str
    dst: str
    shared: tuple[str, ...]

    @property
    def barrier(self) -> bool:
        return not self.shared

    def describe(self) -> str:
        return "barrier" if self.barrier else "matched on " + ", ".join(self.shared)


@dataclass
class PlannedNode:
    """One node, expanded: its members are ``range(len(space))``."""

    id: str
    spec: model.Node
    space: ParameterSpace
    template: PayloadTemplate
    host: str
    scheduling: model.Scheduling
    retries: int
    line: int | None = None
    #: reruns by why an attempt failed, each asking for more (its own ``retry``, else the
    #: defaults' where it gives no ``retries`` of its own)
    retry: model.Retry | None = None
    max_losses: int = 2  # losses of its pilot or node a member may be present at (then quarantined)
    halt: model.Halt | None = None  # its own failure budget
    straggler: model.Straggler | None = None  # its own or the defaults': stop members far past the median
    hold: model.Hold | None = None  # its own or the workflow's: hold a value that only fails
    host_line: int | None = None  # where its host is named: its own 'host', else defaults.host
    run_line: int | None = None
    check: PayloadTemplate | None = None  # iteration until convergence (pwe/planning/trees.py)
    max_iterations: int = 100
    check_line: int | None = None
    tree: Any = None  # its members' trees (pwe.planning.trees.Tree), made by the run's state
    products: list[PathTemplate] = field(default_factory=list)  # (pwe.planning.products)
    products_line: int | None = None
    #: the fewest bytes each product's file must hold to count, one per product (0: that it exists)
    products_least: list[int] = field(default_factory=list)
    validate: PayloadTemplate | None = None  # a member's result checked after it (pwe/planning/validate.py)
    validate_line: int | None = None
    inputs: list[PathTemplate] = field(default_factory=list)  # files its members read (pwe.planning.reuse)
    inputs_line: int | None = None
    container_line: int | None = None  # where its container (its own, else the defaults') is (pwe.planning.images)
    image_id: dict[str, str] | None = None  # its container's part of the keys, made once (pwe.planning.images)
    resources_line: int | None = None  # (pwe.planning.limits: where its user resources are named)
    #: where each key of its (merged) scheduling profile is given: its own scheduling, else defaults'
    scheduling_lines: dict[str, int | None] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.space.size

    def context(self, properties: Mapping[str, Any], index: int) -> dict[str, Any]:
        ctx = dict(properties)
        ctx.update(self.space.values_of(index))  # a parameter shadows a property
        return ctx


@dataclass
class Plan:
    """A workflow ready to run: nodes in topological order, edges, member counts."""

    workflow: model.Workflow
    file: Path
    nodes: dict[str, PlannedNode]
    edges: list[Edge]
    graph: Graph
    warnings: list[str] = field(default_factory=list)
    host: str | None = None  # --host: every node on this host, whatever the file says
    workspace_line: int | None = None  # where 'workspace:' is (pwe.planning.products.workspace)

    @property
    def total_members(self) -> int:
        return sum(n.size for n in self.nodes.values())

    @property
    def properties(self) -> dict[str, Any]:
        return dict(self.workflow.properties)

    def render(self, node_id: str, index: int, check: bool = False) -> str:
        """The command member ``index`` of ``node_id`` runs; :class:`TemplateError` when its
        values make the payload fail (``{{ x / 0 }}``, an attribute the sandbox refuses).
        ``check``: within a time limit and a command's size too (what validate does)."""
        node = self.nodes[node_id]
        try:
            render = node.template.check if check else node.template.render
            return render(node.context(self.workflow.properties, index))
        except Exception as exc:  # noqa: BLE001 - jinja2's errors, and whatever an expression raises
            raise TemplateError(f"node '{node_id}': member {index} cannot render 'run': {error_text(exc)}", self.file,
                                node.run_line) from None

    def command(self, node_id: str, index: int) -> str:
        """What member ``index`` runs: its payload, and after it, where the node has them,
        its ``validate`` (:func:`pwe.planning.validate.with_validate`), then its ``check``
        (:func:`pwe.planning.trees.with_check`)."""
        cmd = self.render(node_id, index)
        node = self.nodes[node_id]
        text = self.validate_command(node_id, index) if node.spec.python is None else None
        if text is not None:
            from .validate import with_validate

            cmd = with_validate(cmd, text)
        if node.check is None:
            return cmd
        from .trees import with_check

        try:
            check = node.check.render(node.context(self.workflow.properties, index))
        except Exception as exc:  # noqa: BLE001 - as render: whatever the template raises
            raise TemplateError(f"node '{node_id}': member {index} cannot render 'check': {exc}", self.file,
                                node.check_line) from None
        return with_check(cmd, check)

    def validate_command(self, node_id: str, index: int) -> str | None:
        """Member ``index``'s ``validate`` rendered (None: its node has none). A command
        member's rides its command (:meth:`command`); a function member's is the task's
        ``vd``, which its worker runs after the call (pilot/pyworker.py)."""
        node = self.nodes[node_id]
        if node.validate is None:
            return None
        try:
            text = node.validate.render(node.context(self.workflow.properties, index))
        except Exception as exc:  # noqa: BLE001 - as render: whatever the template raises
            raise TemplateError(f"node '{node_id}': member {index} cannot render 'validate': {error_text(exc)}",
                                self.file, node.validate_line) from None
        if not text.strip():  # (an empty ( ) is a shell's syntax error: nothing of the member would run)
            raise TemplateError(f"node '{node_id}': member {index}'s 'validate' renders to blank text; give it a "
                                "command for every member", self.file, node.validate_line)
        return text

    def edges_into(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.dst == node_id]

    def edges_out_of(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.src == node_id]

    def upstream(self, edge: Edge, index: int) -> Iterator[int]:
        """Members of ``edge.src`` that member ``index`` of ``edge.dst`` waits for."""
        fixed = self.nodes[edge.dst].space.texts_of(index, edge.shared)
        return self.nodes[edge.src].space.matching(fixed)

    def count_upstream(self, edge: Edge, index: int) -> int:
        fixed = self.nodes[edge.dst].space.texts_of(index, edge.shared)
        return self.nodes[edge.src].space.count_matching(fixed)

    def downstream(self, edge: Edge, index: int) -> Iterator[int]:
        """Members of ``edge.dst`` that wait for member ``index`` of ``edge.src``."""
        fixed = self.nodes[edge.src].space.texts_of(index, edge.shared)
        return self.nodes[edge.dst].space.matching(fixed)

    def critical_path(self) -> tuple[list[str], float | None]:
        """The longest chain of nodes, weighted by each node's walltime per member when
        every node on it gives one (minutes), else by node count (length None)."""
        weights = {n: p.scheduling.maxWallTimePerMember for n, p in self.nodes.items()}
        known = all(w is not None for w in weights.values())
        g = Graph()
        g.add_nodes_from(self.graph.nodes)
        for a, b in self.graph.edges:
            g.add_edge(a, b, w=(weights[b] if known else 1))
        path = g.longest_path() if g.number_of_edges() else [next(iter(self.nodes))]
        if len(path) == 1 and g.number_of_edges() == 0:
            path = [max(self.nodes, key=lambda n: weights[n] or 0)] if known else path
        length = sum(weights[n] for n in path) if known else None
        return path, length


def plan_workflow(path: str | Path, sets: Mapping[str, Any] | None = None, host: str | None = None) -> Plan:
    """Load, validate and expand a workflow file. Raises :class:`InputError`."""
    path = Path(path)
    wf, raw = load_workflow(path, sets)
    plan = build_plan(wf, raw, path, host=host)
    for nid, node in plan.nodes.items():
        # a payload that cannot render (the sandbox refuses it, it divides by zero, it runs
        # away) is found now, not member by member in a run: its first and last member
        for index in sorted({0, node.size - 1}):
            plan.render(nid, index, check=True)
            if node.check is not None or node.validate is not None:
                plan.command(nid, index)
    products.check(plan)  # (their first and last member's paths, inside the workspace)
    reuse.check(plan)  # (inputs: the same)
    functions.check(plan)  # (a function member's module and function, where this machine can tell)
    images.check(plan)  # (a container's image and runtime, where this machine can tell)
    if sets:
        # a --set that no payload reads changes nothing: almost always a misspelt name
        # (a node's own parameter of that name shadows the property there)
        used = set().union(*((n.template.names | (n.check.names if n.check else set())
                              | (n.validate.names if n.validate else set())).union(
                                 *(t.names for t in n.products)) - set(n.space.names)
                             for n in plan.nodes.values()))
        for name, value in sets.items():
            if name not in used:
                raise InputError(f"--set {name}={value_text(value)}: no payload in {path.name} uses the "
                                 f"property '{name}'{did_you_mean(name, used)}")
    return plan


def build_plan(wf: model.Workflow, raw: LineDict, path: Path, host: str | None = None) -> Plan:
    def line_of(*loc: Any) -> int | None:
        return locate(raw, loc)

    graph = _graph_of(wf, path, line_of)
    base = path.parent
    nodes: dict[str, PlannedNode] = {}
    # nodes of one pipeline often read the same file column: read it (and hold it) once
    file_values: dict[tuple[Path, str], Values] = {}
    for nid in graph.lexicographical_topological_sort(key=list(wf.nodes).index):
        node = wf.nodes[nid]
        space = _parameter_space(nid, node, base, path, line_of, file_values)
        run_line = line_of("nodes", nid, "run" if node.run is not None else "python")
        template = _run_template(nid, node, wf, path, run_line)
        known = set(wf.properties) | set(node.parameters)
        sched = _merged_scheduling(nid, node, wf, path, line_of)
        check = _check_template(nid, node, wf, sched, path, line_of)
        validate = validate_template(nid, node, wf, sched, path, line_of("nodes", nid, "validate"))
        if node.group is not None:  # (its keys against its parameters: one line, exit 2)
            from .groups import Groups

            Groups.check(nid, node, path, line_of)
        nodes[nid] = PlannedNode(
            id=nid,
            spec=node,
            space=space,
            template=template,
            host=host or node.host or wf.defaults.host,
            scheduling=sched,
            retries=node.retries if node.retries is not None else wf.defaults.retries,
            retry=_retry_of(nid, node, wf, path, line_of),
            max_losses=node.maxLosses or wf.defaults.maxLosses,
            halt=node.halt,
            straggler=node.straggler or wf.defaults.straggler,
            hold=node.hold or wf.hold,
            line=line_of("nodes", nid),
            host_line=line_of("nodes", nid, "host") if node.host else line_of("defaults", "host"),
            run_line=run_line,
            check=check,
            max_iterations=node.max_iterations or 100,
            check_line=line_of("nodes", nid, "check"),
            products=products.compile_templates(nid, products.paths(node.products), known, path,
                                                line_of("nodes", nid, "products")),
            products_line=line_of("nodes", nid, "products"),
            products_least=products.least(node.products),
            validate=validate,
            validate_line=line_of("nodes", nid, "validate"),
            inputs=products.compile_templates(nid, node.inputs, known, path, line_of("nodes", nid, "inputs"), "inputs"),
            inputs_line=line_of("nodes", nid, "inputs"),
            resources_line=line_of("nodes", nid, "resources"),
            container_line=line_of("nodes", nid, "container") if node.container else line_of("defaults", "container"),
            scheduling_lines={key: line_of("nodes", nid, "scheduling", key)
                              if node.scheduling is not None and key in node.scheduling.model_fields_set
                              else line_of("defaults", "scheduling", key)
                              for key in sched.model_dump(exclude_none=True)},
        )

    total = sum(n.size for n in nodes.values())
    if total > MAX_MEMBERS:
        raise WorkflowSchemaError(f"the workflow has {total:,} members; a run has at most {MAX_MEMBERS:,}", path)
    edges, warnings = _edges(graph, nodes, path, line_of)
    warnings += _big_group_warnings(nodes, path, line_of)
    edges.sort(key=lambda e: (list(nodes).index(e.dst), list(nodes).index(e.src)))
    return Plan(workflow=wf, file=path, nodes=nodes, edges=edges, graph=graph, warnings=warnings, host=host,
                workspace_line=line_of("workspace"))


def _retry_of(nid: str, node: model.Node, wf: model.Workflow, path: Path, line_of: Any) -> model.Retry | None:
    """A node's ``retry``: its own, else the defaults' unless it gives ``retries`` of its own
    (the two at one level: one line, exit 2)."""
    for where, spec, keys in ((("nodes", nid), node, ("nodes", nid, "retry")),
                              (("defaults",), wf.defaults, ("defaults", "retry"))):
        if spec.retry is not None and "retries" in spec.model_fields_set:
            raise WorkflowSchemaError(f"{'node ' + repr(nid) if len(where) == 2 else 'defaults'} gives both 'retries' "
                                      "and 'retry': give one (retries: N is retry: {attempts: N+1})", path,
                                      line_of(*keys))
    if node.retry is not None:
        return node.retry
    return None if node.retries is not None else wf.defaults.retry


def _graph_of(wf: model.Workflow, path: Path, line_of: Any) -> Graph:
    """The workflow's nodes and their ``after`` edges; WorkflowGraphError for a node that
    waits for itself, for an unknown node or twice for one, and for a cycle."""
    graph = Graph()
    graph.add_nodes_from(wf.nodes)
    for nid, node in wf.nodes.items():
        for i, dep in enumerate(node.after):
            if dep == nid:
                raise WorkflowGraphError(f"node '{nid}' lists itself in 'after'", path,
                                         line_of("nodes", nid, "after", i))
            if dep not in wf.nodes:
                raise WorkflowGraphError(
                    f"node '{nid}' waits for unknown node '{dep}'{did_you_mean(dep, wf.nodes)}",
                    path,
                    line_of("nodes", nid, "after", i),
                )
            if graph.has_edge(dep, nid):
                raise WorkflowGraphError(f"node '{nid}' lists '{dep}' twice in 'after'", path,
                                         line_of("nodes", nid, "after", i))
            graph.add_edge(dep, nid)
    cycle = graph.find_cycle()
    if cycle:
        names = [a for a, _ in cycle] + [cycle[0][0]]
        first = cycle[0]
        raise WorkflowGraphError(
            "cycle: " + " -> ".join(names) + "; a workflow must be a DAG",
            path,
            line_of("nodes", first[1], "after", wf.nodes[first[1]].after.index(first[0])),
        )
    return graph


def _parameter_space(nid: str, node: model.Node, base: Path, path: Path, line_of: Any,
                     file_values: dict[tuple[Path, str], Values]) -> ParameterSpace:
    """A node's members: its parameters' values read (a file column once for all nodes:
    ``file_values``) and combined; WorkflowSchemaError for two parameters of one
    environment name, zipped parameters of unequal length, or too many members."""
    values: dict[str, Values] = {}
    upper: dict[str, str] = {}
    for pname, spec in node.parameters.items():
        pline = line_of("nodes", nid, "parameters", pname)
        if pname.upper() in upper:
            raise WorkflowSchemaError(
                f"node '{nid}': parameters '{upper[pname.upper()]}' and '{pname}' would both be "
                f"PWE_PARAM_{pname.upper()}; rename one", path, pline)
        upper[pname.upper()] = pname
        if isinstance(spec, FileSpecMethods):
            key = ((base / spec.file).resolve(), spec.column or pname)
            if key not in file_values:
                file_values[key] = read_values(spec, pname, base, path, pline)
            values[pname] = file_values[key]
        else:
            values[pname] = read_values(spec, pname, base, path, pline)
    if node.combine == "zip" and values:
        lengths = {n: len(v) for n, v in values.items()}
        if len(set(lengths.values())) > 1:
            raise WorkflowSchemaError(
                f"node '{nid}': combine: zip needs parameters of equal length, got "
                + ", ".join(f"{n}={k}" for n, k in lengths.items())
                + " (use combine: product for every combination)",
                path,
                line_of("nodes", nid, "combine"),
            )
    space = ParameterSpace(values, node.combine)
    if space.size > MAX_MEMBERS:
        sizes = " x ".join(f"{n}({len(v):,})" for n, v in values.items())
        raise WorkflowSchemaError(f"node '{nid}' has {space.size:,} members ({sizes}); a node has at most "
                                  f"{MAX_MEMBERS:,}", path, line_of("nodes", nid, "parameters"))
    return space


def _run_template(nid: str, node: model.Node, wf: model.Workflow, path: Path, run_line: int | None) -> PayloadTemplate:
    """A node's ``run``, compiled; TemplateError for bad syntax or a name that is neither a
    property nor a parameter."""
    try:
        # (a function member's payload, as shown and keyed, is its function: pwe/planning/functions.py)
        template = PayloadTemplate(node.run if node.run is not None else f"python: {node.python}")
    except TemplateSyntax as exc:
        raise TemplateError(f"node '{nid}': template error in 'run': {exc.message}"
                            + (f" (line {exc.lineno} of the payload)" if exc.lineno > 1 else ""),
                            path, run_line) from None
    known = set(wf.properties) | set(node.parameters)
    for name in sorted(template.names - known):
        raise TemplateError(
            f"node '{nid}': 'run' uses undefined name '{name}'{did_you_mean(name, known)}; "
            "define it under 'properties' or 'parameters' (or pass --set NAME=VALUE)",
            path,
            run_line,
        )
    return template


def _merged_scheduling(nid: str, node: model.Node, wf: model.Workflow, path: Path,
                       line_of: Any) -> model.Scheduling:
    """A node's scheduling over defaults.scheduling; WorkflowSchemaError where the two,
    each fine alone, contradict each other merged."""
    try:
        return wf.defaults.scheduling.merged(node.scheduling)
    except Exception as exc:  # each fine alone, contradicting each other merged: pydantic's error
        from pydantic import ValidationError  # (imported only then: the checker took the others)

        if not isinstance(exc, ValidationError):
            raise
        msg = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        raise WorkflowSchemaError(f"node '{nid}': 'scheduling' with defaults.scheduling: {msg}", path,
                                  line_of("nodes", nid, "scheduling")) from None


def _edges(graph: Graph, nodes: dict[str, PlannedNode], path: Path, line_of: Any) -> tuple[list[Edge], list[str]]:
    """The plan's edges (each with the parameters its two nodes share), and a warning for
    each shared value downstream that no member upstream has (it will not wait)."""
    edges: list[Edge] = []
    warnings: list[str] = []
    for a, b in graph.edges:
        shared = tuple(n for n in nodes[b].space.names if n in nodes[a].space.values)
        edge = Edge(a, b, shared)
        edges.append(edge)
        for name in shared:
            missing = _uncovered(nodes[a].space.values[name], nodes[b].space.values[name])
            if missing:
                warnings.append(
                    f"{path}:{line_of('nodes', b, 'parameters', name) or ''}: members of '{b}' with "
                    f"{name}={missing} match no member of '{a}' and will not wait for it"
                )
    return edges, warnings


def _big_group_warnings(nodes: dict[str, PlannedNode], path: Path, line_of: Any) -> list[str]:
    """A warning for each node that may form a group over 10,000 members: a group is one
    message, and a huge one is slow (sizes cut by key are not known here)."""
    warnings = []
    for nid, pn in nodes.items():
        if pn.spec.group is not None and not pn.spec.group.split_by_sort_key and \
                min(pn.size, pn.spec.group.maximum_size or pn.size) > 10_000:
            warnings.append(f"{path}:{line_of('nodes', nid, 'group') or ''}: node '{nid}' may form a group of "
                            f"{min(pn.size, pn.spec.group.maximum_size or pn.size):,} members, sent to its pilot as "
                            "one message (about 0.5 KB a member); set group.maximum_size to 10000 or fewer")
    return warnings


def _check_template(nid: str, node: model.Node, wf: model.Workflow, sched: model.Scheduling, path: Path,
                    line_of: Any) -> PayloadTemplate | None:
    """A node's ``check`` (iteration until convergence), compiled and checked: it names
    the next member's parameter values, so the node needs parameters; it runs once after
    the member, so not under an MPI launcher (ranksPerMember 1)."""
    if node.check is None:
        return None
    line = line_of("nodes", nid, "check")
    if not node.parameters:
        raise WorkflowSchemaError(f"node '{nid}': a check names the next member's parameter values, but the node "
                                  "has no 'parameters'; give it at least one", path, line)
    return after_member(nid, "check", node.check, node, wf, sched, path, line,
                        "would start under an MPI launcher; make the check a node of its own or use ranksPerMember 1")


_COVER_LIMIT = 200_000


def _uncovered(up: Values, down: Values) -> str | None:
    """A value of ``down`` that ``up`` lacks (the first, as text), or None.

    Exact for two integer ranges and for value lists up to a few hundred thousand
    entries; larger lists are not checked (the check is advice, not a rule).
    """
    if up is down:
        return None
    if isinstance(up, RangeValues) and isinstance(down, RangeValues) and not (up._float or down._float):
        for probe in (down[0], down[len(down) - 1]):
            if not up.positions(value_text(probe)):
                return value_text(probe)
        if len(down) > 1 and (down.step % up.step or (down.start - up.start) % up.step):
            for i in range(min(len(down), 1000)):
                if not up.positions(value_text(down[i])):
                    return value_text(down[i])
        return None
    if len(up) > _COVER_LIMIT or len(down) > _COVER_LIMIT:
        return None
    have = set(up.texts())
    for t in down.texts():
        if t not in have:
            return t
    return None
