"""The checker's table (:mod:`pwe.base.checker`) derived from pydantic models' core schemas:
plain data (dicts, lists, strings, numbers) naming the rules by ``module:name``. Written by
``python -m pwe.workflow.schema`` into pwe/workflow/check_table.py and hostinfo/check_table.py;
tests/workflow/test_checker.py holds those files equal to what this derives now.

Anything in a core schema the checker does not know (a lax type, a wrap validator, a
validator that is not a plain function of a rules module) is an error here, not a silent
difference: the model is written so that its table can be derived, or the derivation
learns the new kind."""

from __future__ import annotations

import functools
import pprint
from typing import Any

from .errors import PweError

#: The modules a table may name functions of: the standard library alone, so the checker
#: never imports pydantic for them (tests/workflow/test_checker.py checks it in a fresh interpreter).
RULE_MODULES = ("pwe.workflow.rules", "hostinfo.rules", "pilot.allocation")

#: pydantic's constraint validators (functools.partial of them, where a constraint is on a union)
_CONSTRAINTS = {"greater_than_validator": "gt", "greater_than_or_equal_validator": "ge",
                "less_than_validator": "lt", "less_than_or_equal_validator": "le",
                "multiple_of_validator": "multiple_of", "min_length_validator": "min_length",
                "max_length_validator": "max_length"}

_KEYS = {
    "str": {"strict", "min_length", "max_length", "pattern"},
    "int": {"strict", "ge", "gt", "le", "lt", "multiple_of"},
    "float": {"strict", "ge", "gt", "le", "lt", "multiple_of"},
    "bool": {"strict"},
    "list": {"items_schema", "min_length", "max_length"},
    "dict": {"keys_schema", "values_schema", "min_length", "max_length"},
}


class Underivable(PweError):
    """A core schema the checker cannot follow (a defect of the model, found when the table
    is derived: python -m pwe.workflow.schema, tests/workflow/test_checker.py)."""


def derive(*models: type) -> dict[str, Any]:
    """The table of ``models`` and every model they hold: ``{name: node}``."""
    table: dict[str, Any] = {}
    for model in models:
        _Deriver(table).top(model)
    return dict(sorted(table.items()))


def table_source(table: dict[str, Any], what: str) -> str:
    """The table as a Python module's text."""
    return (f'"""{what}: the checker\'s table (pwe/base/checker.py), derived from the pydantic models.\n\n'
            'Written by ``python -m pwe.workflow.schema``; do not edit (tests/workflow/test_checker.py\n'
            'holds it equal to the models)."""\n\n'
            f"TABLE = {pprint.pformat(table, width=110, sort_dicts=False)}\n")


class _Deriver:
    def __init__(self, table: dict[str, Any]):
        self.table = table
        self.defs: dict[str, dict] = {}

    def top(self, model: type) -> None:
        self.node(model.__pydantic_core_schema__)

    def _strict(self, s: dict) -> None:
        # (a lax str is taken: the checker takes a str only, as a strict one does; its other
        # keys were refused above)
        if s["type"] in ("int", "float", "bool") and not s.get("strict"):
            raise Underivable(f"a lax {s['type']} (the checker takes strict types only)")

    def node(self, s: dict) -> dict:
        t = s["type"]
        ref = s.get("ref")
        if t == "definitions":
            for d in s["definitions"]:
                self.defs[d["ref"]] = d
            return self.node(s["schema"])
        if t == "definition-ref":
            return self.node(self.defs[s["schema_ref"]])
        if t == "model" or (ref is not None and _holds_model(s)):
            # a model (its after-validators, which carry its ref, with it): in the table
            # once, by name, and named where it is used
            name = _model_of(s)["cls"].__name__
            if name not in self.table:
                self.table[name] = {"type": "building"}  # (a model that holds itself: not ours)
                self.table[name] = self._whole_model(s)
            return {"type": "model-ref", "name": name}
        return self._plain(s)

    def _whole_model(self, s: dict) -> dict:
        if s["type"] == "model":
            return self._model(s)
        return {"type": s["type"], **self._fn(s["function"]), "schema": self._whole_model(s["schema"])}

    def _plain(self, s: dict) -> dict:
        t = s["type"]
        if t in ("function-after", "function-before"):
            return {"type": t, **self._fn(s["function"]), "schema": self.node(s["schema"])}
        if t == "nullable":
            return {"type": t, "schema": self.node(s["schema"])}
        if t in _KEYS:
            extra = set(s) - _KEYS[t] - {"type", "metadata", "ref"}
            if extra:
                raise Underivable(f"{t} with {sorted(extra)}")
            self._strict(s)
            out: dict[str, Any] = {"type": t}
            for k in sorted(_KEYS[t] - {"strict", "items_schema", "keys_schema", "values_schema"}):
                if k in s:
                    out[k] = s[k]
            if t == "list":
                out["items"] = self.node(s["items_schema"])
            if t == "dict":
                out["keys"] = self.node(s["keys_schema"])
                out["values"] = self.node(s["values_schema"])
            return out
        if t == "literal":
            return {"type": t, "expected": list(s["expected"])}
        if t == "union":
            if s.get("mode", "smart") != "smart":
                raise Underivable(f"a union in mode {s['mode']}")
            return {"type": t, "choices": [self.node(c) for c in s["choices"]]}
        if t == "tagged-union":
            return {"type": t, "disc": self._name(s["discriminator"]),
                    "choices": {k: self.node(c) for k, c in s["choices"].items()}}
        raise Underivable(f"a core schema of type {t!r}")

    def _model(self, s: dict) -> dict:
        cls = s["cls"]
        config = s.get("config", {})
        fields_schema = s["schema"]
        if fields_schema["type"] != "model-fields" or fields_schema.get("computed_fields"):
            raise Underivable(f"{cls.__name__}: computed fields")
        if s.get("custom_init") or s.get("root_model") or s.get("post_init"):
            raise Underivable(f"{cls.__name__}: a custom __init__, a root model or a post-init")
        fields: dict[str, Any] = {}
        for name, f in fields_schema["fields"].items():
            if set(f) - {"type", "schema", "metadata"}:
                raise Underivable(f"{cls.__name__}.{name}: {sorted(set(f) - {'type', 'schema', 'metadata'})}")
            inner = f["schema"]
            field: dict[str, Any] = {}
            if inner["type"] == "default":
                if inner.get("validate_default") or inner.get("default_factory_takes_data"):
                    raise Underivable(f"{cls.__name__}.{name}: a validated default")
                if "default_factory" in inner:
                    field["default"] = self._factory(inner["default_factory"])
                else:
                    field["default"] = ("value", _plain_data(inner["default"]))
                inner = inner["schema"]
            field["schema"] = self.node(inner)
            fields[name] = field
        mixins = [f"{b.__module__}:{b.__qualname__}" for b in cls.__mro__ if b.__module__ in RULE_MODULES]
        return {"type": "model", "name": cls.__name__, "source": f"{cls.__module__}:{cls.__qualname__}",
                "extra": config.get("extra_fields_behavior", "ignore"), "mixins": mixins, "fields": fields}

    def _factory(self, factory: Any) -> tuple:
        core = getattr(factory, "__pydantic_core_schema__", None)
        if core is not None:  # (a model class: the default is that model made with no values)
            self.node(core)
            return ("model", factory.__name__)
        return ("value", _plain_data(factory()))

    def _fn(self, f: dict) -> dict:
        fn = f["function"]
        info = f["type"] == "with-info"
        if isinstance(fn, functools.partial) and fn.func.__name__ in _CONSTRAINTS:
            (kind, bound), = fn.keywords.items()
            if _CONSTRAINTS[fn.func.__name__] != kind:
                raise Underivable(f"{fn!r}")
            return {"op": [kind, bound]}
        out: dict[str, Any] = {"fn": self._name(fn)}
        if info:
            out["info"] = True
        return out

    @staticmethod
    def _name(fn: Any) -> str:
        fn = getattr(fn, "__func__", fn)
        module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if module not in RULE_MODULES or "<" in qual or "." in qual:
            raise Underivable(f"the validator {fn!r} is not a plain function of {', '.join(RULE_MODULES)}: "
                              "write it there, and name it in the model")
        return f"{module}:{qual}"


def _holds_model(s: dict) -> bool:
    while s["type"] in ("function-after", "function-before"):
        s = s["schema"]
    return s["type"] == "model"


def _model_of(s: dict) -> dict:
    while s["type"] != "model":
        s = s["schema"]
    return s


def _plain_data(v: Any) -> Any:
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_plain_data(x) for x in v]
    if type(v) is dict:
        return {k: _plain_data(x) for k, x in v.items()}
    raise Underivable(f"a default that is not plain data: {v!r}")
