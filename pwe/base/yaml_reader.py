"""Read a YAML workflow into a line-numbered raw tree (:mod:`pwe.base.source`).

PyYAML's SafeLoader, changed in four ways that users of a workflow file rely on:
plain scalars are typed by the YAML 1.2 core schema (``on``/``yes`` stay strings,
``007`` stays a string), a key given twice in one mapping is an error instead of a
silent overwrite, every mapping key and sequence item keeps its line number, and
aliases may add at most :data:`MAX_ALIAS_NODES` nodes to the document (an alias bomb,
"billion laughs", is refused at the alias that crosses it, while composing, before
anything walks the tree).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import WorkflowSchemaError, WorkflowSyntaxError
from .numbers import NumberError, shown
from .source import BOOL_RE, FLOAT_RE, INT_RE, NULL_RE, LineDict, LineList, typed_scalar


#: The most nodes aliases may add to one YAML file, counted as the tree they stand for
#: would be written out (an alias of a list of 1,000 values adds 1,001). Construction
#: shares an aliased node, but everything after it (the text checks, the model's
#: validation, expansion) walks the tree written out: nested anchors ("billion laughs")
#: would make a few hundred bytes into 10^9 nodes and hours of work. A million is what a
#: whole file of :data:`MAX_FILE_BYTES` holds written out (validating it takes seconds);
#: a usual use (``defaults: &d`` merged into every node, one list of values shared by
#: a few nodes) adds thousands.
MAX_ALIAS_NODES = 1_000_000


class _Loader(yaml.SafeLoader):
    """SafeLoader with the core schema, duplicate-key errors, line numbers and a bound
    on what aliases expand to."""

    yaml_implicit_resolvers: dict = {}

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._nodes = 0  # the document's nodes so far, each alias counted as what it stands for
        self._aliased = 0  # of which aliases added these
        self._sizes: dict[int, int] = {}  # id(an anchored node) -> its size written out

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            # (an alias inside its own anchor's node has no size yet: the constructor refuses it)
            size = self._sizes.get(id(node), 1)
            self._nodes += size
            self._aliased += size
            if self._aliased > MAX_ALIAS_NODES:
                # the file is not known here: read_yaml adds it
                raise WorkflowSchemaError(
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes (an alias of an alias of ...: "
                    "an alias bomb?); write the values out, or put long lists of values in a parameter file "
                    "({file: values.csv})", line=mark.line + 1)
            return node
        anchored = self.peek_event().anchor is not None
        before = self._nodes
        self._nodes += 1
        node = super().compose_node(parent, index)
        if anchored:
            self._sizes[id(node)] = self._nodes - before
        return node

    def construct_yaml_map(self, node: MappingNode) -> Any:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                hash(key)
            except TypeError:
                # the file is not known here: read_yaml adds it
                raise WorkflowSchemaError("a mapping key must be a plain value, not a list or mapping",
                                          line=line) from None
            if key in seen:
                raise WorkflowSchemaError(f"duplicate key '{key}' (first given on line {seen[key]})", line=line)
            seen[key] = line
        self.flatten_mapping(node)
        data = LineDict(line=node.start_mark.line + 1)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            data[key] = self.construct_object(value_node, deep=True)
            data.key_lines[key] = key_node.start_mark.line + 1
        return data

    def construct_yaml_int(self, node: ScalarNode) -> Any:  # type: ignore[override]
        return self._number(node, INT_RE)

    def construct_yaml_float(self, node: ScalarNode) -> Any:  # type: ignore[override]
        return self._number(node, FLOAT_RE)

    def _number(self, node: ScalarNode, form: Any) -> Any:
        """A plain scalar that looks like a number, read by the one reader's rules (at most
        MAX_DIGITS digits: Python refuses past 4,300, a traceback); ``!!int 0x1f`` and the
        like are refused."""
        value = self.construct_scalar(node)
        try:
            if not form.match(value):
                raise NumberError(f"not a {'whole ' if form is INT_RE else ''}number in decimal digits "
                                  f"(got {shown(value)})")
            return typed_scalar(value)
        except NumberError as exc:
            raise WorkflowSchemaError(f"{exc} (quote it if it is text)", line=node.start_mark.line + 1) from None

    def construct_yaml_seq(self, node: SequenceNode) -> Any:  # type: ignore[override]
        data = LineList(line=node.start_mark.line + 1)
        for item in node.value:
            data.append(self.construct_object(item, deep=True))
            data.item_lines.append(item.start_mark.line + 1)
        return data


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_yaml_seq)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
for _tag, _regexp, _first in (
    ("bool", BOOL_RE, "tTfF"),
    ("null", NULL_RE, ["~", "n", "N", ""]),
    ("int", INT_RE, "-+0123456789"),
    ("float", FLOAT_RE, "-+.0123456789"),
    ("merge", __import__("re").compile(r"^(?:<<)$"), "<"),
):
    _Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _regexp, list(_first))


def _file(what: str) -> str:
    """'a workflow' -> 'a workflow file'; 'a hosts file' stays."""
    return what if what.endswith(" file") else what + " file"


#: The largest workflow or hosts file read (validating one this size takes about 12 s and
#: 450 MB): long lists of values belong in a parameter file ({file: values.csv}).
MAX_FILE_BYTES = 4 * 1024 * 1024


def read_text(path: Path, what: str = "a workflow") -> str:
    """The file as UTF-8 text, or an error naming the line of the first bad byte.

    ``what`` names the kind of file in messages ("a workflow", "a hosts file"). Only a
    regular file of at most :data:`MAX_FILE_BYTES` is read (``/dev/zero`` or a FIFO would
    never end).
    """
    try:
        problem = regular_file(path, MAX_FILE_BYTES, _file(what))
        if problem:
            hint = "" if problem.startswith("not") or "hosts" in what else \
                " (long lists of values belong in a parameter file: {file: values.csv})"
            raise WorkflowSyntaxError(problem + hint, path)
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:  # (grew meanwhile, or a /proc file that says 0 bytes)
            raise WorkflowSyntaxError(f"more than {MAX_FILE_BYTES >> 20} MiB; {_file(what)} holds at most "
                                      f"{MAX_FILE_BYTES >> 20} MiB", path)
    except FileNotFoundError:
        raise WorkflowSyntaxError("no such file", path) from None
    except IsADirectoryError:
        raise WorkflowSyntaxError(f"is a directory, not {_file(what)}", path) from None
    except OSError as exc:
        raise WorkflowSyntaxError(f"cannot read: {exc.strerror}", path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise WorkflowSyntaxError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}); {_file(what)} must be UTF-8 text",
            path,
            line,
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise WorkflowSyntaxError(f"binary data (a NUL byte); {_file(what)} must be text", path, line)
    return text.lstrip("\ufeff")


def regular_file(path: Path, limit: int, what: str) -> str | None:
    """Why ``path`` is not a file to read (a device, a FIFO, a socket, larger than
    ``limit`` bytes), said of ``what`` ("a workflow file"), or None. Asked before opening
    it: opening a FIFO would wait for a writer. OSError (FileNotFoundError,
    IsADirectoryError) as os.stat raises them."""
    import stat

    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(st.st_mode):
        kind = "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else \
            "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "special"
        return f"not a regular file ({kind}); {what} must be a regular file"
    if st.st_size > limit:
        return f"{st.st_size / 2 ** 20:,.1f} MiB is too large; {what} holds at most {limit >> 20} MiB"
    return None


def read_yaml(path: Path, text: str | None = None, what: str = "a workflow", needs: str = "'name' and 'nodes'"
              ) -> LineDict:
    """Parse a YAML file (a workflow unless ``what`` says otherwise) into a :class:`LineDict`.

    ``needs`` names the top-level keys the document must have, for messages.
    """
    if text is None:
        text = read_text(path, what)
    if not text.strip() or all(
        not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()
    ):
        raise WorkflowSchemaError(f"the file is empty; {what} needs at least {needs}", path)
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except WorkflowSchemaError as exc:  # from _Loader, which does not know the file
        raise WorkflowSchemaError(exc.message, path, exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = exc.problem or exc.context or "invalid YAML"
        if isinstance(exc, ConstructorError) and "could not determine a constructor" in str(what):
            what = f"unsupported YAML tag: {what.split('tag', 1)[-1].strip()}"
        raise WorkflowSyntaxError(f"YAML syntax error: {what}", path, line) from None
    except yaml.YAMLError as exc:  # ReaderError (control characters) and friends
        line = None
        pos = getattr(exc, "position", None)
        if pos is not None:
            line = text[:pos].count("\n") + 1
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        raise WorkflowSyntaxError(f"not a YAML text file: {reason}", path, line) from None
    except RecursionError:
        raise WorkflowSyntaxError("YAML nested too deeply", path) from None
    if len(docs) != 1:
        raise WorkflowSchemaError(
            f"the file holds {len(docs)} YAML documents; {_file(what)} holds exactly one", path
        )
    doc = docs[0]
    if not isinstance(doc, LineDict):
        kind = "a list" if isinstance(doc, list) else f"a single value ({type(doc).__name__})"
        raise WorkflowSchemaError(
            f"the document is {kind}; {what} is a mapping with {needs}", path, 1
        )
    return doc
