"""Read a workflow file (YAML or XML) into a validated :class:`~pwe.workflow.model.Workflow`.

The one boundary where reader and pydantic errors become :class:`~pwe.base.errors.InputError`
with the file and line of the offending key. The workflow is checked by the checker derived
from the models (:mod:`pwe.workflow.records`: no pydantic on the road to the first member);
pydantic is imported only where the checker cannot vouch for a workflow, to word its error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from . import records
from ..base.errors import InputError, WorkflowSchemaError, shown_value, wrong_value
from ..base.numbers import NumberError
from ..base.source import LineDict, did_you_mean, find_bad_text, locate, text_problem, typed_scalar
from ..base.yaml_reader import read_text, read_yaml

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from . import model

_PARAM_TAGS = {"values", "range", "file"}
_PRODUCT_TAGS = {"text", "mapping"}  # (model.ProductSpec's, after products[k])
_SCALAR_BRANCHES = {"bool", "int", "float", "str"}


def _strip_branch(loc: tuple) -> tuple:
    return loc[:-1] if loc and loc[-1] in _SCALAR_BRANCHES else loc


def read_raw(path: Path) -> LineDict:
    """The file's raw tree, by its extension (``.xml`` or YAML), sniffing otherwise.

    Every key and text in it must be text a program can take (:func:`~pwe.base.source.text_problem`):
    whatever the workflow holds may reach a command line or an environment."""
    text = read_text(path)
    if path.suffix.lower() == ".xml" or (
        path.suffix.lower() not in (".yaml", ".yml") and text.lstrip().startswith("<")
    ):
        from .xml_reader import read_xml

        raw = read_xml(path, text)
    else:
        raw = read_yaml(path, text)
    bad = find_bad_text(raw)
    if bad:
        loc, problem = bad
        raise WorkflowSchemaError(f"{_place(loc)} {problem}", path, locate(raw, loc))
    return raw


def _place(loc: tuple) -> str:
    """Where a value is, said as a workflow's author names it: property 'p', parameter 't'
    of node 'a', env 'X' of node 'a', 'run' of node 'a'."""
    if len(loc) >= 2 and loc[0] == "properties":
        return f"property '{loc[1]}'"
    if len(loc) >= 3 and loc[0] == "nodes":
        nid, what = loc[1], loc[2]
        if what in ("parameters", "env") and len(loc) >= 4:
            return f"{'parameter' if what == 'parameters' else 'env'} '{loc[3]}' of node '{nid}'"
        return f"'{what}' of node '{nid}'"
    return _describe(loc)


def parse_sets(sets: Iterable[str]) -> dict[str, Any]:
    """``--set name=value`` options as typed property values."""
    out: dict[str, Any] = {}
    for item in sets:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise InputError(f"--set {item!r}: expected NAME=VALUE, e.g. --set nsteps=500")
        problem = text_problem(name) or text_problem(value)
        if problem:  # (a byte that is not UTF-8 on the command line arrives as a lone surrogate)
            raise InputError(f"--set {ascii(name)[1:-1]}: {problem}")
        try:
            out[name] = typed_scalar(value)
        except NumberError as exc:
            raise InputError(f"--set {name}: {exc}") from None
    return out


def load_workflow(path: str | Path, sets: Mapping[str, Any] | None = None) -> tuple["model.Workflow", LineDict]:
    """Validate a workflow file; ``sets`` override (or add) properties.

    Returns the model and the raw tree, whose line numbers later checks use.
    """
    path = Path(path)
    raw = read_raw(path)
    if sets:
        props = raw.get("properties")
        if props is None:
            props = raw["properties"] = LineDict(line=None)
        if not isinstance(props, dict):
            raise WorkflowSchemaError("'properties' must be a mapping of name: value", path,
                                      locate(raw, ["properties"]))
        props.update(sets)
    return validate_raw(raw, path), raw


def validate_raw(raw: LineDict, path: Path) -> "model.Workflow":
    """The workflow's record (:mod:`pwe.workflow.records`), or, where the checker cannot
    vouch for it, pydantic's model or its first error as one line."""
    try:
        return records.check("Workflow", raw)
    except records.Refused:
        pass
    from pydantic import ValidationError

    from . import model

    try:
        return model.Workflow.model_validate(raw)
    except ValidationError as exc:
        raise _input_error(exc, raw, path) from None


def _input_error(exc: "ValidationError", raw: Any, path: Path) -> InputError:
    """The first (outermost) pydantic error as one line naming where and what."""
    from . import model

    errors = exc.errors(include_url=False)
    # a union of scalar types reports one error per branch ('...t[0].bool', '.int', ...):
    # fold them into one error about the value
    branches: dict[tuple, set[str]] = {}
    for e in errors:
        if e["loc"] and e["loc"][-1] in _SCALAR_BRANCHES:
            branches.setdefault(e["loc"][:-1], set()).add(e["loc"][-1])
    # the outermost error first; an unknown key before a missing one (the typo explains it)
    err = min(errors, key=lambda e: (len(_clean_loc(_strip_branch(e["loc"]))), e["type"] != "extra_forbidden"))
    loc = _clean_loc(_strip_branch(err["loc"]))
    folded = branches.get(_strip_branch(err["loc"])) if err["loc"] and err["loc"][-1] in _SCALAR_BRANCHES else None
    line = locate(raw, loc)
    where = _describe(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1], raw)
        known = list(parent.model_fields) if parent else []
        hint = did_you_mean(loc[-1], known)
        if not hint and known:
            hint = f"; known keys: {', '.join(known)}"
        msg = f"unknown key '{loc[-1]}'{' in ' + _describe(loc[:-1]) if loc[:-1] else ''}{hint}"
    elif kind == "missing":
        msg = f"{where}: missing; {_missing_hint(loc)}"
    elif kind == "string_too_long" and (named := _name_kind(loc)):
        msg = (f"{named.format(shown_value(err['input']))} is {len(err['input'])} characters long; ids and names have "
               f"at most {model.MAX_NAME} (they become directory, file and variable names): shorten it")
    elif kind == "string_pattern_mismatch":
        msg = (f"{where}: {shown_value(err['input'])} is not a valid name "
               f"(use letters, digits and '_'{_pattern_extra(loc)})")
    elif folded:
        want = "a single value (text, number or true/false)" if "str" in folded else "a number"
        msg = f"{where}: must be {want} (got {shown_value(err.get('input'))})"
    else:
        msg = f"{where}: {wrong_value(err)}"
    if loc and isinstance(loc[-1], str) and "WallTime" in loc[-1]:
        msg += "; walltimes are minutes"
    return WorkflowSchemaError(msg, path, line)


def _clean_loc(loc: tuple) -> tuple:
    """Drop the union tag pydantic puts after a parameter's name (``parameters.t.range``) and
    after a product's place (``products.0.mapping``)."""
    out = [p for i, p in enumerate(loc) if not (i >= 2 and loc[i - 2] == "parameters" and p in _PARAM_TAGS)
           and not (i >= 2 and loc[i - 2] == "products" and p in _PRODUCT_TAGS)]
    return tuple(p for p in out if p != "[key]")


def _describe(loc: tuple) -> str:
    if not loc:
        return "the workflow"
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "'" + "".join(parts) + "'"


def _model_at(loc: tuple, raw: Any) -> "type[BaseModel] | None":
    """The model class at ``loc`` (a cleaned location) below Workflow, to list its keys."""
    from . import model

    cls: type[BaseModel] = model.Workflow
    i = 0
    while i < len(loc):
        key = loc[i]
        if cls is model.Workflow and key == "nodes":
            cls, i = model.Node, i + 2
        elif cls is model.Node and key == "parameters":
            # parameters.<name>: a RangeSpec or a FileSpec; which one, the raw keys tell
            spec = _walk(raw, loc[: i + 2])
            return model.RangeSpec if isinstance(spec, dict) and "range" in spec else model.FileSpec
        elif cls is model.Node and key == "products":  # products[k]: a mapping's keys (a text has none)
            return model.Product
        elif key in ("defaults",) and cls is model.Workflow:
            cls, i = model.Defaults, i + 1
        elif key == "scheduling":
            cls, i = model.Scheduling, i + 1
        else:
            return None
    return cls


def _walk(tree: Any, loc: tuple) -> Any:
    for key in loc:
        try:
            tree = tree[key]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


def _missing_hint(loc: tuple) -> str:
    key = loc[-1] if loc else ""
    return {
        "name": "a workflow needs a name, e.g. 'name: my-sweep'",
        "nodes": "a workflow needs 'nodes', a mapping of node id to node",
        "run": "every node needs 'run', the command its members execute (or 'python', a function)",
        "range": "write {range: [start, stop]} or {range: [start, stop, step]}",
        "file": "write {file: values.csv, column: NAME}",
    }.get(key, "this key is required")


def _name_kind(loc: tuple) -> str | None:
    """What the name at ``loc`` is, with ``{}`` for the name ("node id {}", "parameter {}
    of node 'a'"), or None for a value that is no id or name. (pwe.workflow.xml_reader._too_long
    says the same of the XML form.)"""
    if loc == ("name",):
        return "the workflow's name {}"
    if len(loc) == 2 and loc[0] in ("nodes", "properties", "limits"):
        return {"nodes": "node id {}", "properties": "property {}", "limits": "limit {}"}[loc[0]]
    if len(loc) == 4 and loc[0] == "nodes" and loc[2] in ("parameters", "env", "resources"):
        what = {"parameters": "parameter", "env": "env variable", "resources": "resource"}[loc[2]]
        return f"{what} {{}} of node '{loc[1]}'"
    if len(loc) == 5 and loc[0] == "nodes" and loc[2:4] == ("group", "sort_by"):
        return f"sort_by name {{}} of node '{loc[1]}'"
    return None


def _pattern_extra(loc: tuple) -> str:
    node_or_name = (len(loc) == 2 and loc[0] == "nodes") or loc == ("name",)
    return ", '.' and '-'" if node_or_name else "; not starting with a digit"
