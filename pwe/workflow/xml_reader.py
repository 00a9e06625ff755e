"""Read an XML workflow into the same line-numbered raw tree the YAML reader produces.

Three steps, each mapping its failures to one :class:`~pwe.base.errors.InputError` line:

1. parse with a locked-down lxml parser (no DTD, no entities, no network: XXE and
   entity bombs cannot happen; a DOCTYPE is refused outright) -> WorkflowSyntaxError;
2. validate against ``schemas/workflow.xsd`` -> WorkflowSchemaError, with libxml2's
   wording rewritten for a scientist (``did you mean``, ``first given on line N``);
3. convert to :class:`~pwe.base.source.LineDict` / :class:`~pwe.base.source.LineList`, so that
   ``pwe.workflow.load`` applies one set of model rules and messages to YAML and XML alike
   (:mod:`pwe.workflow.xml_convert`, beside the XSD's element shapes that step 2 uses too).

This module is the document walk: parsing, validation, and the rewriting of libxml2's
messages, which only makes sense beside the validation that produced them. Typing the
values is :mod:`pwe.workflow.xml_convert`'s.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from lxml import etree

from ..base.errors import WorkflowSchemaError, WorkflowSyntaxError
from ..base.source import LineDict, did_you_mean
from ..base.yaml_reader import read_text
from .xml_convert import Shape, schema, workflow_tree

# A DOCTYPE can only stand in the prolog: after an XML declaration, comments and PIs.
_DOCTYPE_RE = re.compile(r"\s*(?:<\?.*?\?>\s*|<!--.*?-->\s*)*<!DOCTYPE", re.S)


def read_xml(path: Path, text: str | None = None) -> LineDict:
    """Parse, validate and convert an XML workflow file into a :class:`LineDict`."""
    if text is None:
        text = read_text(path)
    if not text.strip():
        raise WorkflowSchemaError(
            'the file is empty; an XML workflow is <workflow name="..."> with at least one <node>', path, 1
        )
    root = _parse(text, path)
    _validate(root, path)
    try:
        return workflow_tree(root)
    except WorkflowSchemaError as exc:  # (a number the one reader refuses: the converter knows no file)
        if exc.file:
            raise
        raise WorkflowSchemaError(exc.message, path, exc.line) from None


# --- 1. parsing ------------------------------------------------------------------------


def _parse(text: str, path: Path) -> etree._Element:
    doctype = _DOCTYPE_RE.match(text)
    if doctype:
        _refuse_doctype(text, doctype.end(), path)
    # A fresh parser per file: lxml keeps an error log per parser.
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
        huge_tree=False, remove_comments=True, remove_pis=True, encoding="utf-8",
    )
    try:
        # Bytes with a forced encoding: read_text already decoded the file as UTF-8, and
        # lxml refuses a str that carries an encoding declaration.
        root = etree.fromstring(text.encode("utf-8"), parser)
    except etree.XMLSyntaxError as exc:
        # exc.msg is this parse's first error (exc.error_log may hold older entries)
        message = re.sub(r", line \d+, column \d+$", "", str(exc.msg))
        raise WorkflowSyntaxError(_syntax_message(message), path, exc.lineno or None) from None
    # Belt and braces: a DOCTYPE the prolog pattern missed still never gets through.
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        pos = text.find("<!DOCTYPE")
        _refuse_doctype(text, pos if pos >= 0 else 0, path)
    return root


def _refuse_doctype(text: str, pos: int, path: Path) -> None:
    raise WorkflowSyntaxError(
        "a <!DOCTYPE> is not allowed in a workflow file (its entities could read local files); "
        "remove it, and write special characters as &amp; &lt; &gt; or &#NNN;",
        path,
        text[:pos].count("\n") + 1,
    )


_CDATA = "or wrap the whole command in <![CDATA[ ... ]]>"
_AMP_HELP = f"write '&' as &amp; (so 'a && b' is 'a &amp;&amp; b'), {_CDATA}"
_LT_HELP = f"write '<' as &lt; (so 'a < b' is 'a &lt; b'), {_CDATA}"

#: libxml2's parser messages, rewritten. First match wins; the fallback keeps libxml2's text.
_SYNTAX: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(r"Opening and ending tag mismatch: (\S+) line (\d+) and (\S+)"),
     lambda m: f"</{m[3]}> found where </{m[1]}> was expected (<{m[1]}> opened on line {m[2]} is not closed)"),
    (re.compile(r"Premature end of data in tag (\S+) line (\d+)"),
     lambda m: f"the file ends before <{m[1]}> (opened on line {m[2]}) is closed"),
    (re.compile(r"EndTag: '</' not found"), lambda m: "the file ends before every element is closed"),
    (re.compile(r"Entity '([^']*)' not defined"),
     lambda m: f"unknown entity '&{m[1]};' (XML knows &amp; &lt; &gt; &quot; &apos; and &#NNN; only); {_AMP_HELP}"),
    (re.compile(r"xmlParseEntityRef: no name|EntityRef: expecting ';'"), lambda m: f"a bare '&': {_AMP_HELP}"),
    (re.compile(r"StartTag: invalid element name"), lambda m: f"a '<' that does not start an element: {_LT_HELP}"),
    (re.compile(r"Unescaped '<' not allowed in attributes values"),
     lambda m: "a '<' inside an attribute value: write it as &lt;"),
    (re.compile(r"Document is empty|Start tag expected, '<' not found"),
     lambda m: 'not an XML document: an XML workflow starts with <workflow name="...">'),
    (re.compile(r"Extra content at the end of the document"),
     lambda m: "more content after the root element ends: a workflow file holds exactly one <workflow>"),
    (re.compile(r"(?:PCDATA invalid Char value|invalid xmlChar value) (\d+)"),
     lambda m: f"control character 0x{int(m[1]):02x} is not allowed in XML; a workflow file must be text"),
    (re.compile(r"Char 0x([0-9A-Fa-f]+) out of allowed range"),
     lambda m: f"control character 0x{int(m[1], 16):02x} is not allowed in XML; a workflow file must be text"),
    (re.compile(r"AttValue: \" or ' expected"), lambda m: 'an attribute value must be quoted, e.g. retries="2"'),
    (re.compile(r"Specification mandates value for attribute (\S+)"),
     lambda m: f"attribute '{m[1]}' has no value: write {m[1]}=\"...\""),
    (re.compile(r"Attribute (\S+) redefined"), lambda m: f"attribute '{m[1]}' is given twice on one element"),
    (re.compile(r"Couldn't find end of Start Tag (\S+)"), lambda m: f"the start tag <{m[1]} is not closed with '>'"),
    (re.compile(r"Excessive depth in document: (\d+)"),
     lambda m: f"elements nested more than {m[1]} deep; a workflow is a few levels deep"),
    (re.compile(r"Comment not terminated"), lambda m: "a comment '<!--' is never closed with '-->'"),
    (re.compile(r"CData section not finished"), lambda m: "a '<![CDATA[' is never closed with ']]>'"),
]


def _syntax_message(message: str) -> str:
    message = message.strip()
    for pattern, render in _SYNTAX:
        m = pattern.search(message)
        if m:
            return f"XML syntax error: {render(m)}"
    return f"XML syntax error: {_strip_ns(message).rstrip('.')}"


# --- 2. validation ---------------------------------------------------------------------


def _validate(root: etree._Element, path: Path) -> None:
    xsd, shapes = schema()
    if xsd.validate(root):
        return
    # The first real error; libxml2 follows some with warnings about the same element.
    entries = [e for e in xsd.error_log if "Warning:" not in e.message and "Not all fields" not in e.message]
    entry = (entries or list(xsd.error_log))[0]
    el = _element_at(root, entry)
    line = el.sourceline if el is not None else entry.line
    message, line = _schema_message(entry.message, el, shapes, line)
    raise WorkflowSchemaError(message, path, line)


def _element_at(root: etree._Element, entry: Any) -> etree._Element | None:
    """The element an XSD error is about: by its XPath, else by its line and name."""
    try:
        found = root.getroottree().xpath(entry.path) if entry.path else []
    except etree.XPathError:  # e.g. a namespace prefix the path cannot resolve
        found = []
    if found and isinstance(found[0], etree._Element):
        return found[0]
    m = _HEAD.match(entry.message)
    name = _strip_ns(m["el"]) if m else None
    return next((e for e in root.iter() if e.sourceline == entry.line and etree.QName(e).localname == name), None)


_HEAD = re.compile(r"^Element '(?P<el>[^']*)'(?:, attribute '(?P<attr>[^']*)')?: (?P<what>.*)$", re.S)
_EXPECTED = re.compile(r"Expected is (?:one of )?\( ([^)]*) \)")
_DUPLICATE = re.compile(r"Duplicate key-sequence \['(?P<value>.*)'\] in \w+ identity-constraint '(?P<name>\w+)'")
_ENUM = re.compile(r"not an element of the set \{(?P<set>.*)\}")

#: How a value of each XSD type is described in an error: "... is not <phrase>".
_PHRASES = {
    "xs:positiveInteger": "a whole number, 1 or more",
    "xs:nonNegativeInteger": "a whole number, 0 or more",
    "xs:integer": "a whole number",
    "xs:decimal": "a decimal number (like 3 or 0.5; no exponent)",
    "xs:boolean": "true or false",
    "minutes": "a number of minutes greater than 0",
    "nodeId": "a valid id (letters, digits, '_', '.' and '-')",
    "identifier": "a valid name (letters, digits and '_'; not starting with a digit)",
}

#: identity constraint in the XSD -> what is duplicated, the attribute that names it
_CONSTRAINTS = {
    "nodeId": ("node id", "id"),
    "propertyName": ("property", "name"),
    "parameterName": ("parameter", "name"),
    "envName": ("env variable", "name"),
}


def _schema_message(raw: str, el: etree._Element | None, shapes: dict[str, Shape], line: int) -> tuple[str, int]:
    """libxml2's XSD message as a sentence a scientist understands, and its line."""
    head = _HEAD.match(raw.strip())
    if not head:
        return f"XML schema: {_strip_ns(raw).rstrip('.')}", line
    name, attr, what = _strip_ns(head["el"]), head["attr"], head["what"].strip()
    if not attr and (req := re.match(r"The attribute '([^']*)' is (?:required|not allowed)", what)):
        attr = req[1]  # libxml2 names the attribute in the sentence for these two
    here = _desc(el) if el is not None else f"<{name}>"
    parent = el.getparent() if el is not None else None
    expected = [_strip_ns(x.strip()) for x in m[1].split(",")] if (m := _EXPECTED.search(what)) else []

    if "No matching global declaration available for the validation root" in what:
        return _wrong_root(head["el"], name), line
    if "This element is not expected" in what and el is not None and parent is not None:
        return _unexpected(el, parent, expected, shapes)
    if "Missing child element" in what:
        return _missing_child(name, here, expected), line
    if attr and "is not allowed" in what:
        known = list(shapes.get(name, Shape(None, {}, (), frozenset())).attrs)
        hint = did_you_mean(attr, known) or (f"; allowed: {', '.join(known)}" if known else "; it takes no attributes")
        return f"unknown attribute '{attr}' on {here}{hint}", line
    if attr and "is required but missing" in what:
        return f'{here} needs the attribute {attr}="..."', line
    if dup := _DUPLICATE.search(what):
        return _duplicate(dup, name, el, parent), line
    if "[facet" in what or "is not a valid value" in what:
        return _bad_value(what, name, attr, el, here, shapes), line
    return _bad_content(what, here), line


def _wrong_root(qname: str, name: str) -> str:
    """A root element other than <workflow>, or one in an XML namespace."""
    if qname.startswith("{"):
        ns = qname[1 : qname.index("}")]
        return (f"the root element <{name}> is in the XML namespace '{ns}'; pwe workflows use no namespace "
                "(remove xmlns)")
    hint = did_you_mean(name, ["workflow"])
    return f'the root element is <{name}>; an XML workflow\'s root element is <workflow name="...">{hint}'


def _missing_child(name: str, here: str, expected: list[str]) -> str:
    """An element without a child it needs (a node's <run>, the workflow's <node>, a
    parameter's values)."""
    if name == "node":
        return (f"{here} has no <run>: every node needs <run>, the command its members execute (or <python>, "
                "a function: package.module:function)")
    if name == "workflow":
        return 'the workflow has no <node>: it needs at least one <node id="..."><run>...</run></node>'
    if name == "parameter":
        return (f'{here} has no values: give <value> elements, one <range start="..." stop="..."/> '
                f'or one <file path="..."/>')
    return f"{here} is missing a child element: expected {_one_of(expected)}"


def _duplicate(dup: re.Match, name: str, el: etree._Element | None, parent: etree._Element | None) -> str:
    """A node id, property, parameter or env variable given twice (and where first)."""
    kind, key = _CONSTRAINTS.get(dup["name"], (name, "name"))
    first = None
    if el is not None and parent is not None:
        first = next((s.sourceline for s in parent.iterchildren(el.tag)
                      if (s.get(key) or "").strip() == dup["value"] and s is not el), None)
    where = f" in {_desc(parent)}" if parent is not None and parent.tag == "node" else ""
    tail = f" (first given on line {first})" if first else ""
    return f"duplicate {kind} '{dup['value']}'{where}{tail}"


def _bad_value(what: str, name: str, attr: str | None, el: etree._Element | None, here: str,
               shapes: dict[str, Shape]) -> str:
    """An attribute's or an element's text that its XSD type refuses: too long, not one of
    a set, not of its type, or empty."""
    shape = shapes.get(name)
    typ = (shape.attrs.get(attr) if attr else shape.type) if shape else None
    value = (el.get(attr) if attr else "".join(el.itertext())) if el is not None else None
    # an attribute: <node id="a">: retries="x" ...; text: <maxCpus>0</maxCpus> in node 'a' ...
    shown = f'{here}: {attr}="{value}"' if attr else f"<{name}>{value}</{name}>{_context(el)}"
    if "exceeds the allowed maximum length" in what and value is not None:
        return _too_long(el, attr, value.strip())
    if enum := _ENUM.search(what):
        choices = re.findall(r"'([^']*)'", enum["set"])
        return f"{shown} is not {_one_of(choices)}{did_you_mean(value or '', choices)}"
    if typ in _PHRASES and value is not None:
        return f"{shown} is not {_PHRASES[typ]}"
    if "underruns the allowed minimum length" in what:
        return f"{shown} is empty"
    plain = _strip_ns(re.sub(r"\[facet [^]]*\] ", "", what)).rstrip(".")
    return f"{here}: {plain}"


def _bad_content(what: str, here: str) -> str:
    """Text or elements where the element's type allows none (or, else, libxml2's words)."""
    if "because the content type is empty" in what:
        return f"{here} takes attributes only, no text or child elements"
    if "Character content other than whitespace is not allowed" in what:
        return f"{here} holds no text of its own; put text in a child element (e.g. <run>) or an attribute"
    if "Element content is not allowed, because the type definition is simple" in what:
        return f"{here} holds text only, not elements; {_LT_HELP}"
    return f"{here}: {_strip_ns(what).rstrip('.')}"


def _too_long(el: etree._Element | None, attr: str | None, value: str) -> str:
    """A node id or name longer than the model's MAX_NAME, said as the YAML form says it
    (:func:`pwe.workflow.load._input_error`)."""
    from ..base.ids import MAX_NAME

    tag = el.tag if el is not None else ""
    kind = {"workflow": "the workflow's name", "node": "node id", "after": "node id in <after>",
            "parameter": "parameter", "property": "property", "env": "env variable", "resource": "resource",
            "limit": "limit", "group": "sort_by name"}.get(tag, f"<{tag}> {attr or 'value'}")
    words = value.split() if tag == "group" else [value]  # (sort_by: a list; libxml2 names the whole)
    long = next((w for w in words if len(w) > MAX_NAME), value)
    shown = repr(long) if len(repr(long)) <= 60 else repr(long)[:57] + "..."
    node = next(el.iterancestors("node"), None) if el is not None and tag not in ("workflow", "node") else None
    of = f" of node '{node.get('id')}'" if node is not None and node.get("id") else ""
    return (f"{kind} {shown}{of} is {len(long)} characters long; ids and names have at most {MAX_NAME} (they "
            "become directory, file and variable names): shorten it")


def _unexpected(el: etree._Element, parent: etree._Element, expected: list[str],
                shapes: dict[str, Shape]) -> tuple[str, int]:
    """An element where the XSD allows none: misspelt, given twice, mixed or out of order."""
    tag, line = etree.QName(el).localname, el.sourceline
    shape = shapes.get(etree.QName(parent).localname)
    allowed = shape.children if shape else ()
    where = _desc(parent)
    if etree.QName(el).namespace:
        ns = etree.QName(el).namespace
        return f"<{tag}> in namespace '{ns}' is not allowed in {where}; pwe uses no namespace", line
    if tag not in allowed:
        hint = did_you_mean(tag, expected or allowed)
        if not hint and (expected or allowed):
            hint = f"; expected {_one_of(expected or list(allowed))}"
        return f"unknown element <{tag}> in {where}{hint}", line
    if parent.tag == "parameter":
        kinds = sorted({c.tag for c in parent} & {"value", "range", "file"})
        if len(kinds) > 1:
            return (f"{where} mixes {' and '.join(f'<{k}>' for k in kinds)}: a parameter takes "
                    f"<value> elements, or one <range>, or one <file>"), line
    earlier = [s.sourceline for s in el.itersiblings(tag, preceding=True)]
    if earlier and shape and tag in shape.single:
        first = min(earlier)
        return f"<{tag}> given twice in {where} (first given on line {first}); it is allowed once", line
    return f"<{tag}> is out of place in {where}: its children go in the order {', '.join(dict.fromkeys(allowed))}", line


def _desc(el: etree._Element) -> str:
    """``<node id="sim">``, ``<parameter name="T"> in node 'sim'``, ``<run> in node 'sim'``."""
    tag = etree.QName(el).localname
    key = "id" if el.get("id") is not None else "name" if el.get("name") is not None else None
    text = f'<{tag} {key}="{el.get(key)}">' if key and tag != "workflow" else f"<{tag}>"
    return text + _context(el)


def _context(el: etree._Element | None) -> str:
    """`` in node 'sim'`` for an element inside a node, else ``''``."""
    node = next(el.iterancestors("node"), None) if el is not None else None
    return f" in node '{node.get('id')}'" if node is not None and node.get("id") else ""


def _one_of(names: list[str]) -> str:
    names = list(dict.fromkeys(names))
    if not names:
        return "another element"
    return f"'{names[0]}'" if len(names) == 1 else "one of " + ", ".join(names)


def _strip_ns(text: str) -> str:
    """lxml's ``{http://namespace}name`` noise, reduced to ``name``."""
    return re.sub(r"\{[^{}\s]+\}", "", text)  # not a '{{ name }}' template in a quoted value
