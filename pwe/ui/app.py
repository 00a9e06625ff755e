"""The Starlette app of the dashboard: its routes, the checks every request passes
(:mod:`.security`), the OpenAPI description (:class:`.openapi.Schemas`, from the YAML
after ``---`` in each endpoint's docstring), and
:func:`serve` (uvicorn). Read endpoints are ``GET /api/...``; actions are ``POST``.

Why one module over 450 lines: it is the dashboard's HTTP side (requests, responses,
routes, the middleware); what the endpoints answer is :mod:`.api`, :mod:`.actions` and
:mod:`.live`, which take no request and make no response. Each endpoint is a few lines and
its OpenAPI description (a quarter of the module), and :func:`make_app` lists them all
under one :class:`Checks`, so that every route and what guards it are read in one file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, \
    Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..base.errors import InputError, OverBudget, PweError, RunNotFound, RunTaken
from ..base.numbers import COUNT_MOST, NumberError, read_int
from ..planning.conditions import Budget
from . import actions, api, live
from .openapi import BASE, Schemas
from .security import COOKIE, MAX_BODY, MAX_QUERIES, MAX_STREAMS, QUERY_SECONDS, Guard, cookies_of

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

NO_TOKEN = ('<!doctype html><html lang="en"><title>pwe dashboard</title><main id="main"><p>This dashboard needs '
            "its token: open the address pwe ui printed.</p></main></html>")


def _error(exc: Exception) -> JSONResponse:
    code = 404 if isinstance(exc, RunNotFound) else 409 if isinstance(exc, RunTaken) else \
        503 if isinstance(exc, OverBudget) else 400 if isinstance(exc, InputError) else 409
    return JSONResponse({"error": str(exc)}, status_code=code)


async def _call(fn: Any, *args: Any, **kw: Any) -> Response:
    try:
        return JSONResponse(await run_in_threadpool(fn, *args, **kw))
    except PweError as exc:
        return _error(exc)


async def _query(request: Request, fn: Any, *args: Any, **kw: Any) -> Response:
    """``fn`` (a query's evaluation: it takes ``budget``) in a thread off the server's loop,
    at most :data:`~.security.MAX_QUERIES` at once, within :data:`~.security.QUERY_SECONDS`:
    503 (one line) when too many run or it ran past its budget (the thread stops there)."""
    guard: Guard = request.app.state.guard
    if guard.queries >= MAX_QUERIES:
        return JSONResponse({"error": f"at most {MAX_QUERIES} queries at once: ask again soon"}, status_code=503)
    guard.queries += 1
    try:
        return JSONResponse(await run_in_threadpool(fn, *args, budget=Budget(QUERY_SECONDS), **kw))
    except PweError as exc:  # (OverBudget: 503)
        return _error(exc)
    finally:
        guard.queries -= 1


def _whole(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return read_int(raw, low, high)  # (ASCII digits, bounded: int() took '١٢', '1_0')
    except NumberError:
        raise InputError(f"{name}: a whole number from {low} to {high}") from None


class _Index(Convertor):
    """A member's index in a URL path: ASCII digits, at most 10 of them (``{index:int}``'s
    int() of 5,000 digits was a ValueError: HTTP 500); any other path matches no route (404)."""

    regex = "[0-9]{1,10}"

    def convert(self, value: str) -> int:
        return read_int(value, 0, COUNT_MOST * 10)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("member_index", _Index())


# -- pages -----------------------------------------------------------------------------------
async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def login(request: Request) -> Response:
    guard: Guard = request.app.state.guard
    given = request.query_params.get("token", "")
    if not given or not guard.login_ok(given):
        return PlainTextResponse("wrong or missing token: open the address pwe ui printed", status_code=401)
    out = RedirectResponse("/", status_code=303)
    out.set_cookie(COOKIE, guard.session, httponly=True, samesite="strict", path="/",
                   secure=request.url.scheme == "https")
    return out


async def session(request: Request) -> Response:
    """Who the page is and what it may do.
    ---
    summary: the session (authenticated, the CSRF value for actions)
    returns: Session
    """
    guard: Guard = request.app.state.guard
    authed = request.scope.get("pwe_auth", False)
    return JSONResponse({"authenticated": authed, "reads": authed or guard.open_reads,
                         "csrf": guard.csrf if authed else None})


# -- reading ----------------------------------------------------------------------------------
async def runs(request: Request) -> Response:
    """Every run (pwe runs --json).
    ---
    summary: the runs, newest first (pwe runs --json)
    returns: [RunSummary]
    """
    return await _call(api.runs, request.app.state.src)


async def run(request: Request) -> Response:
    """One run (pwe status --json, with its DAG).
    ---
    summary: one run (pwe status --json) with dag (pwe validate --json's nodes and edges)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: Status
    """
    return await _call(api.run, request.app.state.src, request.path_params["run_id"])


async def members(request: Request) -> Response:
    """A page of a run's members (pwe show -q --json).
    ---
    summary: a page of members matching a query (pwe show -q QUERY --json)
    parameters:
      - {name: run_id, in: path, required: true, schema: {type: string}}
      - {name: q, in: query, schema: {type: string}, description: "a query, e.g. state=failed; T>300"}
      - {name: node, in: query, schema: {type: string}}
      - {name: state, in: query, schema: {type: string}}
      - {name: offset, in: query, schema: {type: integer, minimum: 0}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 1000}}
    returns: MemberPage
    """
    try:
        q = request.query_params
        offset = _whole(request, "offset", 0, 0, 10**9)
        limit = _whole(request, "limit", 50, 1, api.PAGE_MAX)
    except InputError as exc:
        return _error(exc)
    return await _query(request, api.members, request.app.state.src, request.path_params["run_id"], q.get("q"),
                        q.get("node"), q.get("state"), offset, limit)


def _member_args(request: Request) -> tuple[str, str, int]:
    p = request.path_params
    return p["run_id"], p["node"], int(p["index"])


async def member(request: Request) -> Response:
    """One member, its files and products.
    ---
    summary: one member (pwe show's record) with its files and products
    parameters:
      - {name: run_id, in: path, required: true, schema: {type: string}}
      - {name: node, in: path, required: true, schema: {type: string}}
      - {name: index, in: path, required: true, schema: {type: integer}}
    returns: Member
    """
    return await _call(api.member, request.app.state.src, *_member_args(request))


async def logs(request: Request) -> Response:
    """A member's stdout and stderr (pwe logs --json), bounded.
    ---
    summary: a member's logs (pwe logs --json), the last 256 KiB of each at most
    parameters:
      - {name: run_id, in: path, required: true, schema: {type: string}}
      - {name: node, in: path, required: true, schema: {type: string}}
      - {name: index, in: path, required: true, schema: {type: integer}}
      - {name: tail, in: query, schema: {type: integer, minimum: 1}}
    returns: Logs
    """
    try:
        tail = _whole(request, "tail", 0, 0, 1_000_000) or None
    except InputError as exc:
        return _error(exc)
    return await _call(api.logs, request.app.state.src, *_member_args(request), tail)


async def timeline(request: Request) -> Response:
    """The run's trace, for its timeline.
    ---
    summary: the newest attempts (pwe trace's records) and progress per pilot and per machine
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: Timeline
    """
    return await _call(api.timeline, request.app.state.src, request.path_params["run_id"])


async def failures(request: Request) -> Response:
    """What the run's failures have in common (pwe failures --json).
    ---
    summary: the run's failures by parameter value, reason, error signature and host (pwe failures --json)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: Failures
    """
    return await _query(request, api.failures, request.app.state.src, request.path_params["run_id"])


async def explain(request: Request) -> Response:
    """Why a member is in its state (pwe explain --json).
    ---
    summary: why a member is in its state, in layers (pwe explain --json); the batch system is asked only with ask=1
    parameters:
      - {name: run_id, in: path, required: true, schema: {type: string}}
      - {name: node, in: path, required: true, schema: {type: string}}
      - {name: index, in: path, required: true, schema: {type: integer}}
      - {name: ask, in: query, schema: {type: integer, enum: [0, 1]},
         description: "1: ask the batch system why a queued pilot job waits (an action: 30 a minute)"}
    returns: Explain
    """
    try:
        ask = bool(_whole(request, "ask", 0, 0, 1))
    except InputError as exc:
        return _error(exc)
    guard: Guard = request.app.state.guard
    # (asking runs the batch system's status command: bounded as actions are, per address)
    if ask and not guard.action_allowed(request.client.host if request.client else "?"):
        return JSONResponse({"error": "too many questions to the batch system: wait a minute"}, status_code=429)
    response = await _query(request, api.explain, request.app.state.src, *_member_args(request), ask=ask)
    if response.status_code == 400:  # (explain's bad input is a member the run does not have)
        response.status_code = 404
    return response


async def triggers(request: Request) -> Response:
    """The triggers (pwe trigger list --json).
    ---
    summary: the triggers (pwe trigger list --json)
    returns: [Trigger]
    """
    return await _call(api.triggers)


async def hosts(request: Request) -> Response:
    """The hosts (pwe hosts list --json).
    ---
    summary: the host registry (pwe hosts list --json)
    returns: [Host]
    """
    return await _call(api.hosts)


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.schemas.get_schema(routes=request.app.routes))


# -- live -------------------------------------------------------------------------------------
def _stream(request: Request, gen: Any) -> Response:
    guard: Guard = request.app.state.guard
    if guard.streams >= MAX_STREAMS:
        return JSONResponse({"error": f"at most {MAX_STREAMS} live streams at once"}, status_code=503)
    guard.streams += 1

    async def counted():
        try:
            async for chunk in gen:
                yield chunk
        finally:
            guard.streams -= 1

    return StreamingResponse(counted(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def live_runs(request: Request) -> Response:
    """The runs, pushed as they change.
    ---
    summary: server-sent events, 'runs' (pwe runs --json) whenever one changes
    returns: events
    """
    return _stream(request, live.runs_stream(request.app.state.src, request.is_disconnected))


async def live_run(request: Request) -> Response:
    """One run's journal and status, pushed.
    ---
    summary: server-sent events, 'journal' (new journal records) and 'status' (pwe status --json)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: events
    """
    try:
        d = request.app.state.src.find(request.path_params["run_id"])
    except PweError as exc:
        return _error(exc)
    return _stream(request, live.run_stream(request.app.state.src, d, request.is_disconnected))


# -- actions ----------------------------------------------------------------------------------
async def _body(request: Request) -> dict[str, Any]:
    data = b""
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise InputError(f"a request of more than {MAX_BODY} bytes")
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except ValueError:
        raise InputError("the request's body is not JSON") from None
    if not isinstance(body, dict):
        raise InputError("the request's body is a JSON object")
    return body


async def _act(request: Request, fn: Any, *args: Any, **kw: Any) -> Response:
    return await _call(fn, *args, by=actions.who(request.client.host if request.client else "?"), **kw)


async def cancel(request: Request) -> Response:
    """Cancel a run (pwe cancel --json).
    ---
    summary: cancel the run (pwe cancel); the journal's cancel record says who asked
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: Cancelled
    """
    return await _act(request, actions.cancel, request.app.state.src, request.path_params["run_id"])


async def retry(request: Request) -> Response:
    """Retry failed members (pwe retry --detach [-q QUERY] --json).
    ---
    summary: retry the failed, skipped and cancelled members, or those a query selects (pwe retry -q)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    requestBody: {content: {application/json: {schema: {type: object, properties: {query: {type: string}}}}}}
    returns: Started
    """
    try:
        query = (await _body(request)).get("query")  # (absent or null: every failed member; "": refused)
        if query is not None and not isinstance(query, str):
            raise InputError("query: a text")
    except InputError as exc:
        return _error(exc)
    args = (request, actions.again, request.app.state.src, request.path_params["run_id"])
    if query is None:
        return await _act(*args, retry=True)
    return await _query(*args, retry=True, query=query, by=actions.who(request.client.host if request.client else "?"))


async def set_values(request: Request) -> Response:
    """Change what members not yet started ask for (pwe set [-q QUERY] KEY=VALUE... --json).
    ---
    summary: change what the members a query selects (all without one) ask for from their next attempt (pwe set)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    requestBody: {content: {application/json: {schema: {type: object, required: [pairs],
      properties: {pairs: {type: array, items: {type: string}}, query: {type: string}}}}}}
    returns: Set
    """
    try:
        body = await _body(request)
        pairs, query = body.get("pairs"), body.get("query")
        if not isinstance(pairs, list) or not pairs or len(pairs) > 64 \
                or not all(isinstance(p, str) and len(p) <= 70_000 for p in pairs):
            raise InputError("pairs: a list of 1 to 64 KEY=VALUE texts (memoryPerMember=8000)")
        if query is not None and not isinstance(query, str):
            raise InputError("query: a text")
    except InputError as exc:
        return _error(exc)
    args = (request, actions.set_values, request.app.state.src, request.path_params["run_id"])
    if not query:
        return await _act(*args, pairs=pairs)
    return await _query(*args, pairs=pairs, query=query, by=actions.who(request.client.host if request.client else "?"))


async def resume(request: Request) -> Response:
    """Resume a run (pwe resume --detach --json).
    ---
    summary: resume the run in the background (pwe resume --detach)
    parameters: [{name: run_id, in: path, required: true, schema: {type: string}}]
    returns: Started
    """
    return await _act(request, actions.again, request.app.state.src, request.path_params["run_id"], retry=False)


async def trigger_action(request: Request) -> Response:
    """Fire, enable or disable a trigger (pwe trigger fire|enable|disable --json).
    ---
    summary: fire a trigger now, or enable or disable it (pwe trigger fire|enable|disable)
    parameters:
      - {name: tid, in: path, required: true, schema: {type: string}}
      - {name: what, in: path, required: true, schema: {type: string, enum: [fire, enable, disable]}}
    returns: object
    """
    tid, what = request.path_params["tid"], request.path_params["what"]
    if what == "fire":
        return await _act(request, actions.trigger_fire, tid)
    if what in ("enable", "disable"):
        return await _act(request, actions.trigger_enable, tid, what == "enable")
    return JSONResponse({"error": f"no action '{what[:40]}': fire, enable or disable"}, status_code=404)


async def host_check(request: Request) -> Response:
    """A live check of a host (pwe hosts check --json).
    ---
    summary: reach the host and check it (pwe hosts check NAME --json)
    parameters: [{name: name, in: path, required: true, schema: {type: string}}]
    returns: HostCheck
    """
    return await _call(api.host_check, request.path_params["name"])


class Checks:
    """Every request's checks (:mod:`.security`), as pure ASGI middleware, around every
    route alike (pages, the API and its description, static files, streams): bound
    elsewhere than loopback, nothing but ``/login`` (which checks the token itself) is
    answered without the token. No route is exempt by its path: tests/ui/test_hostile_ui.py
    asks every route of the app. A WebSocket is refused (the dashboard has none)."""

    OPEN = ("/login",)

    def __init__(self, app: Any, guard: Guard):
        self.app, self.guard = app, guard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":  # (lifespan)
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path, method = scope["path"], scope["method"]
        g = self.guard
        bearer = headers.get("authorization", "").lower().startswith("bearer ")
        scope["pwe_auth"] = authed = g.authenticated(headers, cookies_of(headers.get("cookie", "")))
        refusal = None
        if not g.host_ok(headers.get("host", "")):
            refusal = (421, "this dashboard answers requests for its loopback address only")
        elif method not in ("GET", "HEAD", "POST"):
            refusal = (405, "GET or POST")
        elif method == "POST":
            length = headers.get("content-length", "0")
            client = (scope.get("client") or ("?",))[0]
            if not (length.isascii() and length.isdigit()) or len(length) > 18 or int(length) > MAX_BODY:
                refusal = (413, f"a request body of at most {MAX_BODY} bytes")
            elif not authed:
                refusal = (401, "actions need the dashboard's token (open the address pwe ui printed)")
            elif not bearer and not g.origin_ok(headers.get("origin"), headers.get("host", ""), scope["scheme"]):
                refusal = (403, "an action from another origin")
            elif not bearer and not g.csrf_ok(headers.get("x-pwe-csrf")):
                refusal = (403, "an action without the page's CSRF value")
            elif not g.action_allowed(client):
                refusal = (429, "too many actions: wait a minute")
        elif not authed and not g.open_reads and path not in self.OPEN:
            refusal = (401, "this dashboard needs its token (open the address pwe ui printed)")
        if refusal is not None:
            response: Response = JSONResponse({"error": refusal[1]}, status_code=refusal[0])
            if refusal[0] == 401 and path == "/":  # (a browser: a page that says so, and nothing of the app's)
                response = HTMLResponse(NO_TOKEN, status_code=401)
            return await response(scope, receive, self._headers(send))
        return await self.app(scope, receive, self._headers(send))

    @staticmethod
    def _headers(send: Any) -> Any:
        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + [
                    (b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
            await send(message)
        return with_headers


def make_app(src: api.Sources, guard: Guard) -> Any:
    """The dashboard's ASGI app (the checks around Starlette's router)."""
    run_p = "/api/runs/{run_id}"
    member_p = run_p + "/members/{node}/{index:member_index}"
    routes = [
        Route("/", index), Route("/login", login),
        Route("/api/session", session), Route("/api/openapi.json", openapi, include_in_schema=False),
        Route("/api/runs", runs), Route(run_p, run), Route(run_p + "/members", members),
        Route(member_p, member), Route(member_p + "/logs", logs), Route(run_p + "/timeline", timeline),
        Route(run_p + "/failures", failures), Route(member_p + "/explain", explain),
        Route("/api/triggers", triggers), Route("/api/hosts", hosts),
        Route("/api/live/runs", live_runs), Route("/api/live/runs/{run_id}", live_run),
        Route(run_p + "/cancel", cancel, methods=["POST"]), Route(run_p + "/retry", retry, methods=["POST"]),
        Route(run_p + "/set", set_values, methods=["POST"]),
        Route(run_p + "/resume", resume, methods=["POST"]),
        Route("/api/triggers/{tid}/{what}", trigger_action, methods=["POST"]),
        Route("/api/hosts/{name}/check", host_check, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.src, app.state.guard = src, guard
    app.state.schemas = Schemas(BASE)
    return Checks(app, guard)


def serve(src: api.Sources, guard: Guard, host: str, port: int, ready: Any = None) -> None:
    """Serve the dashboard until interrupted (uvicorn; its access log is off: a login's
    address holds the token)."""
    import uvicorn

    config = uvicorn.Config(make_app(src, guard), host=host, port=port, access_log=False, log_level="warning",
                            timeout_graceful_shutdown=2, h11_max_incomplete_event_size=64 * 1024,
                            limit_concurrency=1000)
    server = uvicorn.Server(config)
    if ready is not None:
        async def main() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.02)
            if server.started:
                ready(server)
            await task
        asyncio.run(main())
    else:
        server.run()
