"""A document checked against a table derived from pydantic models, in the standard library
alone: the road to a run's first member checks the workflow and its hosts without importing
pydantic (issue 35: pydantic and its models were ~355 of the ~550 ms before the first member).

The pydantic models (:mod:`pwe.workflow.model`, :mod:`hostinfo.model`) stay the one definition.
``python -m pwe.workflow.schema`` derives each one's table from its core schema
(:mod:`pwe.base.derive`) into a module of plain data (pwe/workflow/check_table.py,
hostinfo/check_table.py), and tests/workflow/test_checker.py holds the tables equal to the models and
checks random documents both ways. The validators and methods the models have are plain
functions and mixins of the standard library (pwe/workflow/rules.py, hostinfo/rules.py) that
the table names, so the checker runs the very same rules.

The checker accepts only what it can vouch for, and builds :class:`Record` objects: the
models' attributes, their methods (the shared mixins), and the part of pydantic's model API
pwe uses (``model_dump``, ``model_copy``, ``model_fields_set``, ``model_validate``). Anything
else (a value of a type it does not take exactly, a rule that refuses, a union it cannot
decide) raises :class:`Refused`, and the caller asks pydantic, which words the error as
before (or, where the two would disagree, decides: the differential tests keep that from
happening).
"""

from __future__ import annotations

import copy
import importlib
import re
from typing import Any, Callable

from .errors import InputError

__all__ = ["Checker", "Record", "Refused"]


class Refused(InputError):
    """The checker cannot vouch for the document: pydantic decides, and words the error
    (never shown to a user: the caller asks pydantic)."""

    def __init__(self, what: str):
        super().__init__(f"the checker cannot vouch for this ({what})")


class Info:
    """What a with-info validator gets (pydantic's ValidationInfo, as far as pwe's use it):
    ``data``, the fields of the model checked before this one."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]):
        self.data = data


def _ref(name: str) -> Any:
    module, _, qual = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


#: a union of these bare nodes takes a value of one of their types as it is (the exact branch)
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b, "le": lambda v, b: v <= b,
    "multiple_of": lambda v, b: v % b == 0,
    "min_length": lambda v, b: len(v) >= b, "max_length": lambda v, b: len(v) <= b,
}


class Record:
    """A checked model's values (frozen), with the pydantic API pwe uses. Each model's record
    class is made by its :class:`Checker` (slots: the fields, ``_set``: those given)."""

    __slots__ = ("_set",)
    _name = ""
    _checker: "Checker"
    _defaults: dict[str, tuple] = {}
    model_fields: dict[str, Any] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{self._name} is frozen: its {name!r} cannot be set (model_copy(update=...) makes another)")

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        """``data`` checked as this model: a record, or pydantic's model where the checker
        cannot vouch (pydantic's ValidationError where the data is wrong)."""
        return cls._checker.validate(cls._name, data)

    @property
    def model_fields_set(self) -> set[str]:
        return set(self._set)

    def _values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields}

    def model_dump(self, *, exclude_none: bool = False, exclude_defaults: bool = False,
                   exclude: set[str] | None = None) -> dict[str, Any]:
        out = {}
        for name, value in self._values().items():
            if exclude and name in exclude:
                continue
            if exclude_none and value is None:
                continue
            if exclude_defaults and name in self._defaults and value == self._checker.default(self._defaults[name]):
                continue
            out[name] = _dump(value, exclude_none, exclude_defaults)
        return out

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        values = self._values()
        if deep:
            values = copy.deepcopy(values)
        values.update(update or {})
        return type(self)._make(values, set(self._set) | set(update or ()))

    @classmethod
    def _make(cls, values: dict[str, Any], given: set[str]) -> Any:
        rec = object.__new__(cls)
        for name in cls.model_fields:
            object.__setattr__(rec, name, values[name])
        object.__setattr__(rec, "_set", frozenset(given))
        return rec

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), tuple(self._values().values())))

    def __repr__(self) -> str:
        return f"{self._name}({', '.join(f'{k}={v!r}' for k, v in self._values().items())})"

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return type(self)._make(copy.deepcopy(self._values(), memo), set(self._set))


def _dump(value: Any, exclude_none: bool, exclude_defaults: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(exclude_none=exclude_none, exclude_defaults=exclude_defaults)
    if isinstance(value, list):
        return [_dump(v, exclude_none, exclude_defaults) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v, exclude_none, exclude_defaults) for k, v in value.items()}
    return value


class Checker:
    """Checks documents against one table (``{model name: node}``, see :mod:`pwe.base.derive`)
    and makes their records. ``module``: the table module's name (the records' module)."""

    def __init__(self, table: dict[str, Any], module: str):
        self.table = table
        self.module = module
        self.records: dict[str, type] = {}
        self._fns: dict[str, Any] = {}
        self._scalars: dict[int, frozenset | None] = {}

    # -- the API ---------------------------------------------------------------------------
    def check(self, name: str, data: Any) -> Any:
        """``data`` as model ``name``'s record; :class:`Refused` where the checker cannot vouch."""
        return self._node(self.table[name], data)

    def validate(self, name: str, data: Any) -> Any:
        """:meth:`check`, else pydantic's ``model_validate`` of the model itself (which raises
        its ValidationError where the data is wrong)."""
        try:
            return self.check(name, data)
        except Refused:
            return _ref(self._model(self.table[name])["source"]).model_validate(data)

    def record(self, name: str) -> type:
        """Model ``name``'s record class."""
        cls = self.records.get(name)
        if cls is None:
            cls = self.records[name] = self._record_class(self._model(self.table[name]))
        return cls

    def default(self, spec: tuple) -> Any:
        """A field's default: ``("value", v)`` (a copy) or ``("model", name)`` (made with no values)."""
        kind, v = spec
        if kind == "model":
            return self.check(v, {})
        return copy.deepcopy(v) if isinstance(v, (list, dict)) else v

    # -- inside ----------------------------------------------------------------------------
    @staticmethod
    def _model(node: dict) -> dict:
        while node["type"] != "model":
            node = node["schema"]
        return node

    def _record_class(self, model: dict) -> type:
        mixins = tuple(_ref(m) for m in model["mixins"])
        fields = list(model["fields"])
        defaults = {k: tuple(f["default"]) for k, f in model["fields"].items() if "default" in f}
        ns = {"__slots__": tuple(fields), "__module__": self.module, "__qualname__": model["name"],
              "_name": model["name"], "_checker": self, "_defaults": defaults,
              "model_fields": {k: f for k, f in model["fields"].items()}}
        return type(model["name"], (Record, *mixins), ns)

    def _fn(self, name: str) -> Any:
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = _ref(name)
        return fn

    def _call(self, node: dict, v: Any, data: dict | None) -> Any:
        op = node.get("op")
        if op is not None:
            kind, bound = op
            try:
                ok = _OPS[kind](v, bound)
            except Exception:
                raise Refused(kind) from None
            if not ok:
                raise Refused(kind)
            return v
        fn = self._fn(node["fn"])
        try:
            return fn(v, Info(data if data is not None else {})) if node.get("info") else fn(v)
        except Exception:  # (pydantic words it: a ValueError's message, or its own)
            raise Refused(node["fn"]) from None

    def _node(self, node: dict, v: Any, data: dict | None = None) -> Any:
        """``v`` checked against ``node``; ``data``: the model's fields checked so far (for a
        with-info validator)."""
        kind = getattr(self, "_k_" + node["type"].replace("-", "_"), None)
        if kind is None:
            raise Refused(node["type"])
        return kind(node, v, data)

    def _k_model_ref(self, node: dict, v: Any, data: dict | None) -> Any:
        return self._node(self.table[node["name"]], v)

    def _k_model(self, node: dict, v: Any, data: dict | None) -> Any:
        return self._model_value(node, v)

    def _k_function_after(self, node: dict, v: Any, data: dict | None) -> Any:
        return self._call(node, self._node(node["schema"], v, data), data)

    def _k_function_before(self, node: dict, v: Any, data: dict | None) -> Any:
        return self._node(node["schema"], self._call(node, v, data), data)

    def _k_nullable(self, node: dict, v: Any, data: dict | None) -> Any:
        return None if v is None else self._node(node["schema"], v, data)

    def _k_str(self, node: dict, v: Any, data: dict | None) -> Any:
        if type(v) is not str:
            raise Refused("str")
        pattern = node.get("pattern")
        # ($ ends a Rust regex (pydantic's) at the text's end, a Python one before a last \n too)
        if pattern is not None and (v.endswith("\n") or not re.search(pattern, v)):
            raise Refused("pattern")
        return self._bounded(node, v)

    def _k_int(self, node: dict, v: Any, data: dict | None) -> Any:
        if type(v) is not int:
            raise Refused("int")
        return self._bounded(node, v)

    def _k_float(self, node: dict, v: Any, data: dict | None) -> Any:
        if type(v) is int:
            if not -2 ** 1023 < v < 2 ** 1023:
                raise Refused("float")  # (too large for a float: pydantic words it)
            v = float(v)  # (a strict float takes an int, as pydantic does)
        elif type(v) is not float:
            raise Refused("float")
        return self._bounded(node, v)

    def _k_bool(self, node: dict, v: Any, data: dict | None) -> Any:
        if type(v) is not bool:
            raise Refused("bool")
        return v

    def _k_literal(self, node: dict, v: Any, data: dict | None) -> Any:
        for e in node["expected"]:
            if type(e) is type(v) and e == v:
                return v
        raise Refused("literal")

    def _k_list(self, node: dict, v: Any, data: dict | None) -> Any:
        if not isinstance(v, list):  # (the YAML reader's lists know their lines)
            raise Refused("list")
        self._bounded(node, v)
        item = node["items"]
        fast = self._scalar_types(item) if item["type"] == "union" else None
        if fast is not None and all(type(x) in fast for x in v):
            return list(v)  # (a parameter's 100,000 values: one pass, no branch tried per value)
        return [self._node(item, x) for x in v]

    def _k_dict(self, node: dict, v: Any, data: dict | None) -> Any:
        if not isinstance(v, dict):
            raise Refused("dict")
        self._bounded(node, v)
        ks, vs = node["keys"], node["values"]
        return {self._node(ks, k): self._node(vs, x) for k, x in v.items()}

    def _k_tagged_union(self, node: dict, v: Any, data: dict | None) -> Any:
        try:
            tag = self._fn(node["disc"])(v)
        except Exception:
            raise Refused("tag") from None
        choice = node["choices"].get(tag) if isinstance(tag, str) else None
        if choice is None:
            raise Refused("tag")
        return self._node(choice, v)

    @staticmethod
    def _bounded(node: dict, v: Any) -> Any:
        for kind in ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length"):
            bound = node.get(kind)
            if bound is not None and not _OPS[kind](v, bound):
                raise Refused(kind)
        return v

    def _k_union(self, node: dict, v: Any, data: dict | None) -> Any:
        """Smart mode, as far as the checker can vouch for it: the one branch that takes the
        value as its exact type, else the only branch that takes it at all."""
        fast = self._scalar_types(node)
        if fast is not None and type(v) in fast:
            return v
        taken = []
        for choice in node["choices"]:
            try:
                taken.append(self._node(choice, v))
            except Refused:
                continue
        exact = [x for x in taken if type(x) is type(v)]
        if exact:
            return exact[0]
        if len(taken) == 1:
            return taken[0]
        raise Refused("union")

    def _scalar_types(self, node: dict) -> frozenset | None:
        """The types of a union of bare scalar branches (Scalar: bool, int, float, str), else None."""
        key = id(node)
        if key not in self._scalars:
            choices = node["choices"]
            bare = all(set(c) == {"type"} and c["type"] in _SCALARS for c in choices)
            self._scalars[key] = frozenset(_SCALARS[c["type"]] for c in choices) if bare else None
        return self._scalars[key]

    def _model_value(self, model: dict, v: Any) -> Any:
        cls = self.record(model["name"])
        if type(v) is cls:
            return v  # (pydantic does not check an instance of the model again)
        if not isinstance(v, dict):
            raise Refused("model")
        fields = model["fields"]
        if model["extra"] == "forbid" and any(k not in fields for k in v):
            raise Refused("extra")
        data: dict[str, Any] = {}
        for name, field in fields.items():
            if name in v:
                data[name] = self._node(field["schema"], v[name], data)
            elif "default" in field:
                data[name] = self.default(field["default"])
            else:
                raise Refused("missing")
        return cls._make(data, {k for k in v if k in fields})
