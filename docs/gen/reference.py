"""The reference pages' generated parts, from the code itself: the workflow file's fields
from its JSON Schema (pwe.workflow.schema, made from the pydantic models), and pwe's error tree
(pwe.base.errors) with the troubleshooting entry each class must have.

Used by docs/gen/hooks.py at build time and by tests/project/test_docs_site.py."""

from __future__ import annotations

import html
import inspect
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the source tree, as the tests use it
    sys.path.insert(0, str(ROOT))

#: the order the models' sections come in, after the top level; a model the schema gains
#: and this list lacks comes last, so none is left out
MODEL_ORDER = ["Node", "Defaults", "Scheduling", "Group", "RangeSpec", "FileSpec"]


def _text(s: str) -> str:
    """A schema description as markdown table text: rST ``code`` as `code`, HTML and pipes escaped."""
    parts = re.split(r"``(.*?)``|`(.*?)`", s or "")
    out = []
    for i in range(0, len(parts), 3):
        out.append(html.escape(parts[i], quote=False))
        if i + 1 < len(parts):
            code = parts[i + 1] if parts[i + 1] is not None else parts[i + 2]
            if code is not None:
                out.append(f"`{code}`")
    return " ".join("".join(out).split()).replace("|", "\\|")


def _bounds(spec: dict) -> list[str]:
    """A field's bounds in words (``≥ 1``, ``at most 100 characters``, ...)."""
    bounds = []
    for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in spec:
            bounds.append(f"{word} {spec[key]}")
    if "maxLength" in spec:
        bounds.append(f"at most {spec['maxLength']} characters")
    if "minItems" in spec:
        bounds.append(f"at least {spec['minItems']} items")
    if "maxItems" in spec:
        bounds.append(f"at most {spec['maxItems']} items")
    return bounds


def _type(spec: dict) -> str:
    """A field's type in words, with links to the models' sections."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec or "oneOf" in spec:
        kinds = [_type(s) for s in spec.get("anyOf", spec.get("oneOf")) if s.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    kind = spec.get("type")
    bounds = _bounds(spec)
    if kind == "array":
        items = spec.get("items")
        if isinstance(items, dict) and items:
            word = f"list of {_type(items)}"
        elif "prefixItems" in spec:
            word = "[" + ", ".join(_type(s) for s in spec["prefixItems"]) + "]"
        else:
            word = "list"
    elif kind == "object":
        values = spec.get("additionalProperties")
        pattern = spec.get("patternProperties")
        if pattern:
            (key, values), = pattern.items()
            word = f"map of NAME → {_type(values)}"
        elif isinstance(values, dict):
            word = f"map of NAME → {_type(values)}"
        else:
            word = "mapping"
    elif isinstance(kind, list):
        word = " or ".join(kind)
    else:
        word = kind or "any"
    return word + (f" ({', '.join(bounds)})" if bounds else "")


def _table(model: dict) -> list[str]:
    required = set(model.get("required", []))
    rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
    for name, spec in model.get("properties", {}).items():
        if name in required:
            default = "**required**"
        elif "default" in spec:
            default = f"`{json.dumps(spec['default'])}`" if spec["default"] not in (None, [], {}) else "-"
        else:
            default = "-"
        rows.append(f"| `{name}` | {_type(spec)} | {default} | {_text(spec.get('description', ''))} |")
    return rows


def workflow_reference(schema: dict | None = None) -> str:
    """The workflow file's reference in markdown: the top level, then each model, every
    field with its type, default and description, from the JSON Schema."""
    if schema is None:
        from pwe.workflow.schema import generate

        schema = json.loads(generate())
    defs = schema.get("$defs", {})
    order = [m for m in MODEL_ORDER if m in defs] + sorted(set(defs) - set(MODEL_ORDER))
    out = ["## Workflow (the top level)", "", _text(schema.get("description", "")), "", *_table(schema), ""]
    for name in order:
        model = defs[name]
        out += [f"## {name}", "", _text(model.get("description", "")), ""]
        if model.get("properties"):
            out += _table(model)
        else:
            out.append(f"Type: {_type(model)}")
        out.append("")
    return "\n".join(out)


# -- what each protocol does with the scheduling profile -----------------------------------


def scheduling_fields(protocol: str) -> str:
    """The scheduling profile's fields a protocol acts on (pwe.planning.placement.USED_SCHEDULING),
    and the rest, which pwe validate, plan and run warn about for a node on such a host."""
    from pwe.workflow.model import Scheduling
    from pwe.planning.placement import USED_SCHEDULING

    used = USED_SCHEDULING[protocol]
    every = [n for n in Scheduling.model_fields if n != "submissionType"]
    acted = ", ".join(f"`{n}`" for n in every if n in used)
    warned = ", ".join(f"`{n}`" for n in every if n not in used)
    return (f"A node on a `{protocol}` host acts on these fields of its scheduling profile: {acted}.\n\n"
            f"These it does not use, and `pwe validate`, `plan` and `run` say so in a warning: {warned or 'none'}.")


def expand_markers(markdown: str) -> str:
    """Every ``<!-- pwe: scheduling-fields PROTOCOL -->`` of a page, written out."""
    return re.sub(r"<!-- pwe: scheduling-fields (\w+) -->", lambda m: scheduling_fields(m.group(1)), markdown)


# -- the errors --------------------------------------------------------------------------


def error_classes() -> list[type]:
    """Every exception class of pwe.base.errors (PweError and what derives from it), in the
    module's order."""
    from pwe.base import errors

    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, errors.PweError) and c.__module__ == errors.__name__]


def error_tree() -> str:
    """The drawing of the tree in pwe.base.errors' docstring (class, exit status, what, where)."""
    from pwe.base import errors

    lines = errors.__doc__.splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().startswith("class") and "exit" in l)
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line[4:] if line.startswith("    ") else line)
    return "\n".join(block)


def entry_headings(markdown: str) -> list[str]:
    """The troubleshooting page's entries: its '## Name' headings."""
    return re.findall(r"^## (\w+)\s*$", markdown, re.M)


def troubleshooting_problems(markdown: str) -> list[str]:
    """What is wrong with the troubleshooting page's entries against pwe.base.errors: a class
    without an entry, an entry naming no class, an entry without a fix."""
    names = [c.__name__ for c in error_classes()]
    headings = entry_headings(markdown)
    problems = [f"pwe.base.errors.{n} has no '## {n}' entry in docs/troubleshooting.md"
                for n in names if n not in headings]
    problems += [f"docs/troubleshooting.md has an entry '## {h}', which is no class of pwe.base.errors"
                 for h in headings if h not in names]
    problems += [f"docs/troubleshooting.md lists {h} twice" for h in set(headings) if headings.count(h) > 1]
    for name, body in _entries(markdown):
        if name in names and "**Fix.**" not in body:
            problems.append(f"docs/troubleshooting.md's entry {name} says no '**Fix.**'")
    return problems


def _entries(markdown: str) -> list[tuple[str, str]]:
    parts = re.split(r"^## (\w+)\s*$", markdown, flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def error_facts(name: str) -> str:
    """The generated line under an entry's heading: its exit status, its place in the tree,
    and its docstring's first paragraph."""
    cls = next(c for c in error_classes() if c.__name__ == name)
    base = cls.__mro__[1].__name__
    parent = "" if name == "PweError" else f"; a kind of [{base}](#{base.lower()})"
    doc = inspect.getdoc(cls) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return f"*Exit status {cls.exit_status}{parent}.* {_text(first)}"


def troubleshooting(markdown: str) -> str:
    """The page with the tree drawn where it says ``<!-- pwe: error-tree -->`` and each
    entry's facts under its heading."""
    markdown = markdown.replace("<!-- pwe: error-tree -->", "```text\n" + error_tree() + "\n```")
    names = {c.__name__ for c in error_classes()}
    return re.sub(r"^## (\w+)\s*$", lambda m: m.group(0) + ("\n\n" + error_facts(m.group(1)) if m.group(1) in names
                                                            else ""), markdown, flags=re.M)


def environment(markdown: str) -> str:
    """The environment page's markers replaced by the tables of pilot.settings: the
    ``PWE_*`` variables pwe reads (``<!-- pwe: settings -->``) and those it sets
    (``<!-- pwe: outputs -->``)."""
    from pilot.settings import outputs_table, settings_table

    return markdown.replace("<!-- pwe: settings -->", settings_table()).replace("<!-- pwe: outputs -->",
                                                                               outputs_table())
