"""What keeps the dashboard safe: its token, the session cookie, CSRF, Origin and Host
checks, bounds on requests and actions, and paths that stay inside a run directory.

- **The token** (:func:`token`): 32 random bytes, made the first time, kept in
  ``<pwe state>/ui/token`` (mode 600 in a directory of mode 700; one of another mode or
  owner is refused), shown once when made; ``pwe ui --rotate-token`` makes a new one
  (the old one and every session made with it stop working).
- **Who may read.** Bound to a loopback address, anyone on this machine may read (the
  Host header must name a loopback host: a DNS-rebinding page is refused). Bound to any
  other address, every request needs the token: a session cookie (``/login?token=...``
  sets it: HttpOnly, SameSite=Strict) or ``Authorization: Bearer TOKEN``.
- **Who may act** (cancel, retry, resume, triggers): always a session or the token, and,
  for a browser, the CSRF value (``X-PWE-CSRF``, an HMAC of the token that only a
  same-origin page can read from ``/api/session``) and an ``Origin`` that is the
  dashboard's own. A JSON body only, at most :data:`MAX_BODY` bytes; at most
  :data:`ACTIONS_PER_MINUTE` actions a minute from one address.
- **Queries** (a page of members, a retry's selection) run off the server's loop, at most
  :data:`MAX_QUERIES` at once, each for at most :data:`QUERY_SECONDS` (then 503, one line):
  one query never holds the others up (its ``~`` patterns are matched in linear time:
  :mod:`pwe.planning.conditions`).
- Every comparison with a secret is constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
import time
from collections import deque
from hashlib import sha256
from pathlib import Path
from typing import Any

from ..base.errors import InputError

#: The largest request body taken (actions carry a query at most).
MAX_BODY = 64 * 1024
#: Actions one client address may ask for in a minute.
ACTIONS_PER_MINUTE = 30
#: Live streams open at once (each is a task reading a journal's tail).
MAX_STREAMS = 256
#: Seconds a query (a page of members, a retry's selection) may run, in a thread of its own
#: off the server's loop; past it the request is answered 503 and the thread stops.
QUERY_SECONDS = 10.0
#: Queries evaluated at once (the rest of the threads stay free for the other requests).
MAX_QUERIES = 4
COOKIE = "pwe_ui_session"


def token_path() -> Path:
    from ..base.places import state_dir

    return state_dir() / "ui" / "token"


def _check_private(path: Path, want: int) -> None:
    st = os.lstat(path)
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & ~want or \
            (want == 0o600 and not stat.S_ISREG(st.st_mode)):
        raise InputError(f"{path}: must be {'a file' if want == 0o600 else 'a directory'} of yours with mode "
                         f"{want:o} (it is {stat.S_IMODE(st.st_mode):o}); remove it and start pwe ui again "
                         "(a new token is made)")


def token(rotate: bool = False) -> tuple[str, bool]:
    """(the dashboard's token, whether it was made just now). Made when there is none or
    with ``rotate``; a token file or directory of another owner or a wider mode is
    :class:`InputError` (one line)."""
    path = token_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(path.parent, 0o700)
    if not rotate and os.path.lexists(path):
        _check_private(path, 0o600)
        text = path.read_text().strip()
        if len(text) >= 32:
            return text, False
    made = secrets.token_urlsafe(32)
    tmp = path.with_name(f".token.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(made + "\n")
    os.replace(tmp, path)
    return made, True


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, every symbolic link followed, is inside ``root`` (a run directory)."""
    try:
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return os.path.commonpath([real_root, real]) == real_root


class Guard:
    """The token, the sessions and the limits of one dashboard."""

    def __init__(self, secret: str, bind: str, port: int, launch: str | None = None):
        self.secret = secret
        self.open_reads = is_loopback(bind)
        self.port = port
        self.launch = launch  # a one-time login word shown in the URL `pwe ui` prints (loopback)
        self.session = hmac.new(secret.encode(), b"pwe ui session", sha256).hexdigest()
        self.csrf = hmac.new(secret.encode(), b"pwe ui csrf", sha256).hexdigest()
        self._actions: dict[str, deque[float]] = {}
        self.streams = self.queries = 0

    # -- who is asking
    def login_ok(self, given: str) -> bool:
        ok = hmac.compare_digest(given.encode(), self.secret.encode())
        if not ok and self.launch:
            ok = hmac.compare_digest(given.encode(), self.launch.encode())
        return ok

    def authenticated(self, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and hmac.compare_digest(auth[7:].strip().encode(),
                                                                      self.secret.encode()):
            return True
        return hmac.compare_digest(cookies.get(COOKIE, "").encode(), self.session.encode())

    def host_ok(self, host_header: str) -> bool:
        """A loopback dashboard answers only requests that name a loopback host (DNS rebinding)."""
        if not self.open_reads:
            return True
        host = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
        return is_loopback(host.strip("[]") if host.startswith("[") else host)

    def origin_ok(self, origin: str | None, host_header: str, scheme: str) -> bool:
        """An action's Origin is the dashboard's own (scheme://Host of the request)."""
        return bool(origin) and hmac.compare_digest(origin.encode(), f"{scheme}://{host_header}".encode())

    def csrf_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf.encode())

    # -- bounds
    def action_allowed(self, client: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        q = self._actions.setdefault(client, deque())
        while q and now - q[0] > 60:
            q.popleft()
        if len(q) >= ACTIONS_PER_MINUTE:
            return False
        q.append(now)
        if len(self._actions) > 10_000:  # (forget the quiet ones)
            for k in [k for k, v in self._actions.items() if not v]:
                del self._actions[k]
        return True


def cookies_of(header: str) -> dict[str, Any]:
    from http.cookies import CookieError, SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {k: m.value for k, m in jar.items()}
