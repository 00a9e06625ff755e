"""A validated XML workflow converted into the line-numbered raw tree the YAML reader
produces (:func:`workflow_tree`; :mod:`pwe.workflow.xml_reader` parses and validates
first), and the XSD's element shapes (:func:`schema`) that drive both the conversion and
the validation's hints.

Typing follows the YAML form: free values (``<value>``, ``<property>``, ``<env>``) are
typed by :func:`pwe.base.source.typed_scalar` unless ``type="string"``; a field the XSD types
(``retries``, ``maxCpus``, ``shareNodes``, ...) is converted by its XSD type, which the
document was just validated against (so ``<shareNodes>1</shareNodes>``, valid XSD, is
True rather than the integer 1); every other text field is a string.
"""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from lxml import etree

from ..base.errors import WorkflowSchemaError
from ..base.numbers import NumberError, read_float, read_int
from ..base.source import LineDict, LineList, typed_scalar

XS = "{http://www.w3.org/2001/XMLSchema}"


# --- the XSD's shapes --------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What the XSD allows for one element name; drives error hints and conversion."""

    type: str | None  # the simple type of its text, if it holds text
    attrs: dict[str, str | None]  # attribute -> simple type (None: anonymous)
    children: tuple[str, ...]  # child elements in schema order
    single: frozenset[str]  # children allowed at most once


@functools.lru_cache(maxsize=1)
def schema() -> tuple[etree.XMLSchema, dict[str, Shape]]:
    """The XSD and the element shapes read from it: loaded once, on first use."""
    data = resources.files("schemas").joinpath("workflow.xsd").read_bytes()
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, remove_comments=True)
    doc = etree.fromstring(data, parser)
    return etree.XMLSchema(doc), _shapes(doc)


def _shapes(xsd: etree._Element) -> dict[str, Shape]:
    """Element name -> shape, so that hints and types come from the XSD, not a copy of it."""
    named = {ct.get("name"): ct for ct in xsd.iterfind(f"{XS}complexType")}

    def walk(ct: etree._Element, attrs: dict, children: list, single: set, simple: list) -> None:
        for sub in ct:
            tag = etree.QName(sub).localname
            if tag == "element":  # a child: do not descend into its own type
                children.append(sub.get("name"))
                if sub.get("maxOccurs", "1") == "1":
                    single.add(sub.get("name"))
            elif tag == "attribute":
                attrs[sub.get("name")] = sub.get("type")
            elif tag == "extension":
                base = sub.get("base")
                if base in named:
                    walk(named[base], attrs, children, single, simple)
                else:
                    simple.append(base)
                walk(sub, attrs, children, single, simple)
            elif tag in ("sequence", "choice", "all", "simpleContent", "complexContent"):
                walk(sub, attrs, children, single, simple)

    shapes: dict[str, Shape] = {}
    for el in xsd.iter(f"{XS}element"):
        typ = el.get("type")
        ct = named.get(typ) if typ else el.find(f"{XS}complexType")
        if ct is None:
            shapes[el.get("name")] = Shape(typ, {}, (), frozenset())
            continue
        attrs: dict = {}
        children: list = []
        single: set = set()
        simple: list = []
        walk(ct, attrs, children, single, simple)
        shapes[el.get("name")] = Shape(simple[0] if simple else None, attrs, tuple(children), frozenset(single))
    return shapes


# --- conversion ------------------------------------------------------------------------


def _decimal(text: str) -> int | float:
    t = text.strip()  # xs:decimal has no exponent: a '.' is what makes it a float in YAML too
    return read_float(t) if "." in t else read_int(t)


def _integer(text: str) -> int:
    return read_int(text.strip())  # (the XSD took any count of digits: at most MAX_DIGITS are read)


#: Fields the XSD types are converted by that type: the XSD already accepted the text.
_CONVERT: dict[str | None, Callable[[str], Any]] = {
    "xs:positiveInteger": _integer,
    "xs:nonNegativeInteger": _integer,
    "xs:integer": _integer,
    "xs:decimal": _decimal,
    "minutes": _decimal,
    "xs:boolean": lambda t: t.strip() in ("true", "1"),
    "failedBudget": lambda t: _integer(t) if t.strip().isascii() and t.strip().isdigit() else t.strip(),  # 10 or "10%"
}


def _typed(el: etree._Element, text: str, convert: Callable[[str], Any] = typed_scalar) -> Any:
    """``convert(text)``; a number the one reader refuses (too many digits) is one line at ``el``."""
    try:
        return convert(text)
    except NumberError as exc:
        raise WorkflowSchemaError(f"<{el.tag}>: {exc}", line=el.sourceline) from None


def _text(el: etree._Element) -> str:
    # itertext: CDATA sections are merged by the parser; comments were removed by it
    return "".join(el.itertext())


def _field(el: etree._Element) -> Any:
    """An element's text converted by its XSD type; any other text field is a string."""
    typ = schema()[1][el.tag].type
    return _typed(el, _text(el), _CONVERT.get(typ, str.strip))


def _attr(el: etree._Element, name: str) -> Any:
    typ = schema()[1][el.tag].attrs.get(name)
    return _typed(el, el.get(name), _CONVERT.get(typ, str.strip))


def _free(el: etree._Element) -> Any:
    """A ``<value>``/``<property>``/``<env>``: YAML-typed, or its exact text with type="string"."""
    return _text(el) if el.get("type") == "string" else _typed(el, _text(el).strip())


def _script(text: str) -> str:
    """``run`` text: dedented, blank lines around it dropped, the lines kept as written.

    A multi-line script ends with one newline, as a YAML ``run: |`` block does, so the
    same workflow in either form renders the same payload.
    """
    body = textwrap.dedent(text).rstrip().lstrip("\n")
    return body + "\n" if "\n" in body else body


def _put(d: LineDict, key: Any, value: Any, line: int | None) -> Any:
    d[key] = value
    d.key_lines[key] = line
    return value


def workflow_tree(root: etree._Element) -> LineDict:
    wf = LineDict(line=root.sourceline)
    _put(wf, "name", _attr(root, "name"), root.sourceline)
    if root.get("order") is not None:
        _put(wf, "order", _attr(root, "order"), root.sourceline)
    if root.get("workspace") is not None:  # (pwe.planning.products)
        _put(wf, "workspace", root.get("workspace"), root.sourceline)
    nodes = LineDict(line=None)
    for child in root:
        if child.tag == "description":
            _put(wf, "description", textwrap.dedent(_text(child)).strip(), child.sourceline)
        elif child.tag == "properties":
            props = _put(wf, "properties", LineDict(line=child.sourceline), child.sourceline)
            for prop in child:
                _put(props, _attr(prop, "name"), _free(prop), prop.sourceline)
        elif child.tag == "defaults":
            _put(wf, "defaults", _defaults(child), child.sourceline)
        elif child.tag == "limits":  # <limit name="license">4</limit>: as limits: {license: 4}
            _put(wf, "limits", _amounts(child), child.sourceline)
        elif child.tag in ("halt", "budget", "hold"):  # <halt failed="10%" when="soon"/>: as halt: {failed: 10%, ...}
            _put(wf, child.tag, _attrs(child), child.sourceline)
        elif child.tag == "inputs":  # <input>data/*.csv</input>: a pattern, as <product> is read (pwe.workflow.inputs)
            _put(wf, "inputs", _lines(child, strip=True), child.sourceline)
        elif child.tag == "node":
            if nodes.line is None:
                nodes.line = child.sourceline
                _put(wf, "nodes", nodes, child.sourceline)
            _put(nodes, _attr(child, "id"), _node(child), child.sourceline)
    return wf


def _attrs(el: etree._Element) -> LineDict:
    """An element of attributes only (``<halt>``, ``<budget>``, ``<grow>``) as a mapping."""
    out = LineDict(line=el.sourceline)
    for name in el.keys():
        _put(out, name, _attr(el, name), el.sourceline)
    return out


def _retry(el: etree._Element) -> LineDict:
    """``<retry attempts="3" on="oom walltime 75"><grow memoryPerMember="2"/></retry>``: the
    YAML ``retry:`` (``on`` space-separated; a number is an exit status)."""
    out = LineDict(line=el.sourceline)
    _put(out, "attempts", _attr(el, "attempts"), el.sourceline)
    if el.get("on") is not None:
        on = LineList(line=el.sourceline)
        for word in el.get("on").split():
            on.append(_typed(el, word, _integer) if word.isascii() and word.isdigit() else word)
            on.item_lines.append(el.sourceline)
        _put(out, "on", on, el.sourceline)
    for child in el:  # only <grow>
        _put(out, "grow", _attrs(child), child.sourceline)
    return out


def _amounts(el: etree._Element) -> LineDict:
    """``<limit name="x">N</limit>``... as ``{x: N}``."""
    out = LineDict(line=el.sourceline)
    for child in el:
        _put(out, _attr(child, "name"), _field(child), child.sourceline)
    return out


def _defaults(el: etree._Element) -> LineDict:
    out = LineDict(line=el.sourceline)
    for name in ("host", "retries", "maxLosses"):
        if el.get(name) is not None:
            _put(out, name, _attr(el, name), el.sourceline)
    for child in el:  # <scheduling>, <setup_per_node>, <retry>, <straggler>
        if child.tag == "setup_per_node":
            _put(out, "setup_per_node", _lines(child), child.sourceline)
        elif child.tag == "retry":
            _put(out, "retry", _retry(child), child.sourceline)
        elif child.tag in ("straggler", "container"):
            _put(out, child.tag, _attrs(child), child.sourceline)
        else:
            _put(out, "scheduling", _scheduling(child), child.sourceline)
    return out


def _lines(el: etree._Element, strip: bool = False) -> LineList:
    """``<setup_per_node><line>...</line>...</setup_per_node>`` (or ``<inputs><input>``...,
    ``strip``: a path, without the spaces around it) as the YAML form's list."""
    out = LineList(line=el.sourceline)
    for child in el:
        out.append(_text(child).strip() if strip else _text(child))
        out.item_lines.append(child.sourceline)
    return out


def _scheduling(el: etree._Element) -> LineDict:
    out = LineDict(line=el.sourceline)
    for child in el:
        _put(out, child.tag, _field(child), child.sourceline)
    return out


def _group(el: etree._Element) -> LineDict:
    """``<group sort_by="a b" maximum_size="4" ...><include>COND</include>*</group>``: the
    YAML ``group:`` keys, as attributes (sort_by space-separated), each include an element."""
    out = LineDict(line=el.sourceline)
    for name in ("reverse_sort", "split_by_sort_key", "maximum_size", "submit_whole"):
        if el.get(name) is not None:
            _put(out, name, _attr(el, name), el.sourceline)
    if el.get("sort_by") is not None:
        names = LineList(line=el.sourceline)
        for word in el.get("sort_by").split():
            names.append(word)
            names.item_lines.append(el.sourceline)
        _put(out, "sort_by", names, el.sourceline)
    for child in el:  # only <include>
        if "include" not in out:
            _put(out, "include", LineList(line=child.sourceline), child.sourceline)
        out["include"].append(_text(child).strip())
        out["include"].item_lines.append(child.sourceline)
    return out


def _product(el: etree._Element) -> str | LineDict:
    """``<product>PATH</product>``, the path template as written; with ``nonEmpty`` or
    ``minBytes``, the YAML mapping ``{path: PATH, nonEmpty: ..., minBytes: ...}``."""
    path = _text(el).strip()
    if el.get("nonEmpty") is None and el.get("minBytes") is None:
        return path
    out = LineDict(line=el.sourceline)
    _put(out, "path", path, el.sourceline)
    for name in ("nonEmpty", "minBytes"):
        if el.get(name) is not None:
            _put(out, name, _attr(el, name), el.sourceline)
    return out


def _parameter(el: etree._Element) -> LineList | LineDict:
    """``[v, ...]``, ``{range: [start, stop(, step)]}`` or ``{file: path(, column)}``."""
    first = el[0]  # the XSD guarantees one or more <value>, or one <range>, or one <file>
    if first.tag == "value":
        values = LineList(line=first.sourceline)
        for v in el:
            values.append(_free(v))
            values.item_lines.append(v.sourceline)
        return values
    spec = LineDict(line=first.sourceline)
    if first.tag == "range":
        bounds = LineList(line=first.sourceline)
        for name in ("start", "stop", "step"):
            if first.get(name) is not None:
                bounds.append(_attr(first, name))
                bounds.item_lines.append(first.sourceline)
        _put(spec, "range", bounds, first.sourceline)
    else:
        _put(spec, "file", _attr(first, "path"), first.sourceline)
        if first.get("column") is not None:
            _put(spec, "column", _attr(first, "column"), first.sourceline)
    return spec


#: A node's child elements by the YAML key each makes: one value of the node's own ...
_VALUE: dict[str, tuple[str, Callable[[etree._Element], Any]]] = {
    "description": ("description", lambda el: textwrap.dedent(_text(el)).strip()),
    "run": ("run", lambda el: _script(_text(el))),
    "python": ("python", lambda el: _text(el).strip()),  # a function member (pwe/planning/functions.py)
    "check": ("check", lambda el: _script(_text(el))),  # iteration until convergence (pwe/planning/trees.py)
    "validate": ("validate", lambda el: _script(_text(el))),  # a member's result checked (pwe/planning/validate.py)
    "scheduling": ("scheduling", _scheduling),
    "setup_per_node": ("setup_per_node", _lines),
    "container": ("container", _attrs),  # (pwe/planning/images.py)
    "modules": ("modules", lambda el: _lines(el, strip=True)),  # (pwe/engine/environs.py)
    "group": ("group", _group),
    "retry": ("retry", _retry),
    "halt": ("halt", _attrs),
    "straggler": ("straggler", _attrs),
    "hold": ("hold", _attrs),
}
#: ... an item of a list of the node's ...
_ITEM: dict[str, tuple[str, Callable[[etree._Element], Any]]] = {
    "after": ("after", _field),
    "product": ("products", lambda el: _product(el)),  # (pwe.planning.products: a path template, as written)
    "input": ("inputs", lambda el: _text(el).strip()),  # (pwe.planning.reuse: a path template, as written)
}
#: ... or an entry, under its name="...", of a mapping of the node's
#: (``<resource name="license">1</resource>``: ``resources: {license: 1}``)
_ENTRY: dict[str, tuple[str, Callable[[etree._Element], Any]]] = {
    "parameter": ("parameters", _parameter),
    "env": ("env", _free),
    "resource": ("resources", _field),
}


def _node(el: etree._Element) -> LineDict:
    node = LineDict(line=el.sourceline)
    for name in ("combine", "retries", "host", "max_iterations", "maxLosses", "directory", "reuse"):
        if el.get(name) is not None:
            _put(node, name, _attr(el, name), el.sourceline)
    for child in el:
        line = child.sourceline
        if child.tag in _VALUE:
            key, value = _VALUE[child.tag]
            _put(node, key, value(child), line)
        elif child.tag in _ITEM:
            key, value = _ITEM[child.tag]
            if key not in node:
                _put(node, key, LineList(line=line), line)
            node[key].append(value(child))
            node[key].item_lines.append(line)
        elif child.tag in _ENTRY:
            key, value = _ENTRY[child.tag]
            if key not in node:
                _put(node, key, LineDict(line=line), line)
            _put(node[key], _attr(child, "name"), value(child), line)
    return node
