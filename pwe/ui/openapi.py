"""The base of the dashboard's OpenAPI description: its info and the schemas of its
documents (the command line's ``--json`` documents; each lists the fields every one of
them has: tests/ui/test_ui.py checks the documents served against them). The paths come
from the endpoints' docstrings (:mod:`.app`), read by :class:`Schemas` (Starlette's
``SchemaGenerator``).
"""

from __future__ import annotations

from typing import Any

from starlette.schemas import SchemaGenerator


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required,
            "properties": {k: ({"type": v} if isinstance(v, str) else v) for k, v in props.items()}}


_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
_NUM = {"type": "number", "nullable": True}

BASE: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "pwe dashboard", "version": "1",
             "description": "The documents are those of the pwe command line's --json."},
    "components": {"schemas": {
        "Error": _obj(["error"], error="string"),
        "Session": _obj(["authenticated", "reads", "csrf"], authenticated="boolean", reads="boolean",
                        csrf={"type": "string", "nullable": True}),
        "RunSummary": _obj(["run_id", "from", "state", "finished", "total", "started", "duration", "core_hours",
                            "run_dir"],
                           run_id="string", state="string", finished="integer",
                           total={"type": "integer", "nullable": True}, started=_NUM, duration=_NUM,
                           core_hours=_NUM, run_dir="string", **{"from": "string"}),
        "Status": _obj(["run_id", "phase", "nodes", "totals", "pilots", "run_dir", "dag"],
                       run_id="string", phase="string", nodes={"type": "object", "additionalProperties": _COUNTS},
                       totals=_COUNTS, pilots={"type": "object"}, run_dir="string", core_hours={"type": "object"},
                       dag=_obj(["nodes", "edges"], nodes={"type": "array"}, edges={"type": "array"})),
        "Member": _obj(["node", "member", "parameters", "state", "attempts", "exit_status", "outputs"],
                       node="string", member="integer", parameters={"type": "object"}, state="string",
                       attempts="integer", exit_status={"type": "integer", "nullable": True},
                       outputs={"type": "object"}, why="string", files={"type": "array"},
                       products={"type": "array"}),
        "MemberPage": _obj(["run_id", "query", "offset", "limit", "more", "members"],
                           run_id="string", query="string", offset="integer", limit="integer", more="boolean",
                           members={"type": "array", "items": {"$ref": "#/components/schemas/Member"}}),
        "Logs": _obj(["node", "member"], node="string", member="integer",
                     stdout=_obj(["path", "text"], path="string", text="string", cut="integer"),
                     stderr=_obj(["path", "text"], path="string", text="string", cut="integer")),
        "Timeline": _obj(["run_id", "attempts", "records", "by_pilot", "by_machine", "pilots"],
                         run_id="string", attempts="integer", records={"type": "array"},
                         by_pilot={"type": "object"}, by_machine={"type": "object"}, pilots={"type": "object"}),
        "Failures": _obj(["run", "failed", "done", "nodes", "by_value", "not_compared", "by_reason", "by_signature",
                          "signatures_read", "by_host"],
                         run="string", failed="integer", done="integer", nodes={"type": "object"},
                         by_value={"type": "array", "items": _obj(
                             ["node", "parameter", "value", "failed", "done", "rate", "difference"],
                             node="string", parameter="string", value="string", failed="integer", done="integer",
                             rate="number", difference="number")},
                         not_compared={"type": "array"},
                         by_reason={"type": "array", "items": _obj(["reason", "members"], reason="string",
                                                                   members="integer")},
                         by_signature={"type": "array", "items": _obj(
                             ["signature", "members", "example", "line"], signature="string", members="integer",
                             example="string", line="string")},
                         signatures_read="integer",
                         by_host={"type": "array", "nullable": True, "items": _obj(
                             ["host", "failed", "done", "rate"], host="string", failed="integer", done="integer",
                             rate="number")},
                         from_offset="integer"),
        "Explain": _obj(["run", "member", "node", "index", "parameters", "state", "attempts", "layers"],
                        run="string", member="string", node="string", index="integer", parameters={"type": "object"},
                        state="string", attempts="integer", prerequisites={"type": "array"},
                        pilots={"type": "array"}, allocation={"type": "object", "nullable": True},
                        layers=_obj(["member"], **{k: {"type": "array", "items": {"type": "string"}}
                                                   for k in ("member", "placement", "allocation")})),
        "Trigger": _obj(["id", "kind", "when", "overlap", "workflow", "pending", "enabled", "next"],
                        id="string", kind="string", when="string", overlap="string", workflow="string",
                        pending="integer", enabled="boolean", next={"type": "string", "nullable": True}),
        "Host": _obj(["name", "protocol", "contact", "cores_per_node", "nodes", "source"],
                     name="string", protocol="string", contact="string", source="string",
                     cores_per_node={"type": "integer", "nullable": True},
                     nodes={"type": "integer", "nullable": True}),
        "HostCheck": _obj(["host", "ok", "checks"], host="string", ok="boolean", checks={"type": "array"}),
        "Cancelled": _obj(["run_id", "cancelled"], run_id="string", cancelled="boolean"),
        "Started": _obj(["run_id", "run_dir"], run_id="string", run_dir="string", selected="integer"),
        "Set": _obj(["run_id", "taken"], run_id="string", taken="boolean", later="integer", running="integer"),
    }},
}


class Schemas(SchemaGenerator):
    """Starlette's generator, with ``returns: NAME`` (``[NAME]``: a list of them; ``events``: an
    event stream) in a docstring written out as the OpenAPI responses it stands for."""

    def parse_docstring(self, func_or_method: Any) -> dict[str, Any]:
        spec = dict(super().parse_docstring(func_or_method))
        kind = spec.pop("returns", None)
        if kind is None:
            return spec
        error = {"description": "refused, or bad input (one line)",
                 "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        if isinstance(kind, list):  # (YAML reads [NAME] as a list)
            kind = f"[{kind[0]}]"
        if kind == "events":
            ok = {"description": "server-sent events", "content": {"text/event-stream": {}}}
        else:
            name = kind.strip("[]")
            one = {"type": "object"} if name == "object" else {"$ref": f"#/components/schemas/{name}"}
            schema = {"type": "array", "items": one} if kind.startswith("[") else one
            ok = {"description": "the document", "content": {"application/json": {"schema": schema}}}
        spec["responses"] = {200: ok, **{code: error for code in (400, 401, 403, 404, 409, 429)}}
        return spec
