"""``Dashboard``: the supervisor's HTTP endpoint (``--http``): the page, ``/api``, actions.

Routes: ``GET /`` the page, ``/static/…`` its script and style (from the package),
``/api/state`` everything the page shows, ``/api/running``, ``/api/finished``,
``/api/tubes``, ``/api/connections`` its parts, ``/metrics`` (with prometheus-client);
``POST /api/actions/{kick,delete,pause,drain}`` with ``X-Cmdstalk-Token``; kick, delete
and pause take ``server`` (``host:port``, one the supervisor serves; optional with one).

It runs on an asyncio event loop it is given, or on its own loop in one thread
(``cmdstalk-dashboard``) when given none; ``listener`` bounds what clients may take,
``snapshots`` renders each part at most twice a second, ``offload`` keeps everything that
blocks (a server's stats, an action's connection, /proc for ``live``) off the loop.

What a page shows comes from jobs, which are attacker-controlled: the page builds every
element with ``textContent`` and the Content-Security-Policy allows no inline script and
nothing from elsewhere. Actions are refused (403) without a configured token, with a wrong
one, and by any method but POST; a custom header means another site's page cannot send
one (it would need a CORS preflight, which this server never grants). A ``Host`` that does
not name the dashboard is refused (``hosts``: DNS rebinding).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from importlib import resources
from typing import Any

from cmdstalk_py.ops.dashboard.actions import ActionError, Actions
from cmdstalk_py.ops.dashboard.board import Board
from cmdstalk_py.ops.dashboard.hosts import HostCheck
from cmdstalk_py.ops.dashboard.listener import Listener, error_response
from cmdstalk_py.ops.dashboard.live import LiveUsage
from cmdstalk_py.ops.dashboard.offload import Offload
from cmdstalk_py.ops.dashboard.queues import Queues
from cmdstalk_py.ops.dashboard.snapshots import Rendered, Snapshots
from cmdstalk_py.ops.dashboard.throttle import LogThrottle
from cmdstalk_py.ops.dashboard.wire import Request, Response
from cmdstalk_py.ops.metrics import parse_hostport
from cmdstalk_py.ops.observers import Observer

log = logging.getLogger("cmdstalk.dashboard")

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
TOKEN_HEADER = "x-cmdstalk-token"
BACKLOG = 1024  # connections waiting in the kernel cost the process no descriptor
CLOSE_TIMEOUT = 5.0


class Dashboard(Observer):
    """Serves the dashboard on ``listen`` (HOST:PORT, ``:PORT`` = 127.0.0.1) until closed.

    ``board`` must be added to the supervisor's observers (``start_dashboard`` does not);
    ``connections()`` lists the brokers' connections; ``metrics`` renders ``/metrics``;
    ``allow_hosts``: names a ``Host`` header may give besides the listening address's;
    ``live`` reads the running jobs' trees (a ``LiveUsage`` of /proc when not given).
    On ``loop`` when given (from any thread, running or not yet), else on its own loop in
    a thread of its own. The socket is bound before this returns: OSError if it cannot be.
    """

    def __init__(
        self,
        listen: str,
        board: Board,
        queues: Queues,
        actions: Actions,
        token: str | None,
        connections: Callable[[], list[dict[str, Any]]],
        metrics: Callable[[], tuple[bytes, str]] | None = None,
        allow_hosts: Iterable[str] = (),
        loop: asyncio.AbstractEventLoop | None = None,
        live: LiveUsage | None = None,
    ) -> None:
        host, port = parse_hostport(listen)
        self.board, self.queues, self.actions = board, queues, actions
        self.live = live if live is not None else LiveUsage()
        self.token = token or None
        self.connections = connections
        self.metrics = metrics
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
        bound = sock.getsockname()
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        try:
            self.hosts = HostCheck(host, self.address[0], allow_hosts)
        except ValueError:
            sock.close()
            raise
        self._static = {path: (_asset(name), kind) for path, (name, kind) in STATIC.items()}
        self._offload = Offload()
        self.snapshots = Snapshots(self._parts(), self._offload)
        self._throttle = LogThrottle(log)
        self.listener = Listener(sock, self.respond, HEADERS)
        self._thread: threading.Thread | None = None
        self.closed = False
        if loop is None:
            loop = asyncio.new_event_loop()
            loop.set_exception_handler(self._loop_error)
            self._thread = threading.Thread(target=loop.run_forever, name="cmdstalk-dashboard",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        self.loop = loop
        loop.call_soon_threadsafe(self.listener.start)

    @property
    def url(self) -> str:
        host = f"[{self.address[0]}]" if ":" in self.address[0] else self.address[0]
        return f"http://{host}:{self.address[1]}/"

    def state(self) -> dict[str, Any]:
        """Everything the page shows (``/api/state``)."""
        servers = self.queues.servers
        return {
            "supervisor": {
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "server": servers[0] if servers else None,
                "servers": servers,
                "state": "draining" if self.actions.drained else self.board.state,
                "actions": self.token is not None,
            },
            "running": self.running(),
            "finished": self.board.finished(),
            "queue": self.queues.snapshot(),
            "connections": self.connection_states(),
        }

    def running(self) -> list[dict[str, Any]]:
        """The running jobs (``Board.running``), each with its tree's figures now:
        ``memory_bytes``, ``cpu_s``, ``procs`` (null until a scan has seen it). Reads /proc:
        called off the loop, as every part is."""
        jobs = self.board.running()
        figures = self.live.of([(job["pid"], job["started_at"]) for job in jobs])
        for job, now in zip(jobs, figures, strict=True):
            job["memory_bytes"] = now.memory_bytes if now else None
            job["cpu_s"] = round(now.cpu_s, 2) if now else None
            job["procs"] = now.procs if now else None
        return jobs

    def connection_states(self) -> list[dict[str, Any]]:
        """Each broker's connection, its reconnections, and the dashboard's own."""
        reconnects = self.board.reconnects()
        states = []
        for c in self.connections():
            count, last = reconnects.get(c["where"], (0, None))
            states.append({**c, "reconnects": count, "last_reconnect": last})
        for queue in self.queues.snapshot()["servers"]:
            states.append({"where": "dashboard", "server": queue["server"],
                           "connected": queue["up"], "error": queue["error"],
                           "reconnects": None, "last_reconnect": None})  # fmt: skip
        return states

    def _parts(self) -> dict[str, Callable[[], Rendered]]:
        """What ``/api/NAME`` (and ``/metrics``) render, each off the loop."""
        parts: dict[str, Callable[[], Any]] = {
            "state": self.state,
            "running": self.running,
            "finished": self.board.finished,
            "tubes": self.queues.snapshot,
            "connections": self.connection_states,
        }
        rendered: dict[str, Callable[[], Rendered]] = {
            name: partial(_json_rendering, part) for name, part in parts.items()
        }
        if self.metrics is not None:
            rendered["metrics"] = self.metrics
        return rendered

    def act(self, name: str, body: dict[str, Any]) -> str:
        """Carry out action ``name`` (blocking: off the loop); ``ActionError`` when refused
        or failed. A job kicked or deleted loses its buttons on the page."""
        try:
            server = body.get("server")
            if server is not None and not isinstance(server, str):
                raise ValueError("server must be a string, host:port")
            if name in ("kick", "delete"):
                job_id = int(body["job_id"])
                message = getattr(self.actions, name)(job_id, server)
                target = self.actions.server(server)
                self.board.acted(target.address, job_id, "kicked" if name == "kick" else "deleted")
                return str(message)
            if name == "pause":
                return self.actions.pause(str(body["tube"]), int(body["seconds"]), server)
        except (KeyError, TypeError, ValueError) as e:
            raise ActionError(400, f"bad request: {e}") from None
        except OSError as e:
            raise ActionError(502, f"server connection failed: {e}") from None
        if name == "drain":
            return self.actions.drain()
        raise ActionError(404, f"no action {name}")

    # -- serving (on the loop) -------------------------------------------------------------

    async def respond(self, request: Request) -> Response:
        """The answer to ``request``."""
        if not self.hosts.allows(request.headers.get("host")):
            return error_response(403, "unexpected Host header")
        if request.method in ("GET", "HEAD"):
            return await self._get(request.path)
        if request.method == "POST":
            return await self._post(request)
        return _with_allow(error_response(405, "GET, HEAD or POST"), "GET, HEAD, POST")

    async def _get(self, path: str) -> Response:
        if path in self._static:
            body, kind = self._static[path]
            return Response(200, body, kind)
        if path.startswith("/api/actions/"):
            return _with_allow(error_response(405, "actions take POST"), "POST")
        name = _part(path)
        if name not in self.snapshots.parts:
            return error_response(404, "not found")
        try:
            body, kind = await self.snapshots.get(name)
        except Exception as e:  # a part's bug: a 500 and one line per 10 s, not a dead loop
            self._throttle.log("render", logging.ERROR, "dashboard: rendering %s failed: %r",
                               path, e, exc_info=e)  # fmt: skip
            return error_response(500, f"rendering {path} failed")
        return Response(200, body, kind)

    async def _post(self, request: Request) -> Response:
        if not request.path.startswith("/api/actions/"):
            return error_response(404, "not found")
        if self.token is None:
            return error_response(403, "actions are disabled (start cmdstalk with --http-token)")
        given = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode("utf-8")):
            return error_response(403, "wrong or missing token")
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            return error_response(400, "bad request: not JSON")
        if not isinstance(body, dict):
            return error_response(400, "bad request: expected a JSON object")
        name = request.path[len("/api/actions/"):]
        try:
            message = await self._offload.run(partial(self.act, name, body))
        except ActionError as e:
            return error_response(e.status, str(e))
        finally:
            self.snapshots.expire()  # the poll that follows shows what the action did
        log.warning("dashboard action: %s", message)
        return Response(200, json.dumps({"ok": True, "message": message}).encode("ascii"))

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        self._throttle.log("loop", logging.ERROR, "dashboard: %s%s", context.get("message"),
                           f": {error!r}" if error else "", exc_info=error)  # fmt: skip

    # -- closing ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop serving, on the loop (for a caller on the loop; ``close()`` otherwise)."""
        self.closed = True
        await self.listener.aclose()
        self.snapshots.cancel()

    def close(self) -> None:
        """Stop serving (the supervisor has stopped); again: nothing more."""
        if not self.closed:
            self._stop_serving()
        self._offload.close()
        self.queues.close()

    def _stop_serving(self) -> None:
        try:
            if self._thread is not None:  # our own loop: wait for it, then end it
                done = asyncio.run_coroutine_threadsafe(self.aclose(), self.loop)
                done.result(timeout=CLOSE_TIMEOUT)
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout=CLOSE_TIMEOUT)
                self.loop.close()
            else:  # the caller's loop: it may be this very thread's, so nothing to wait for
                self.closed = True
                self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self.aclose()))
        except (RuntimeError, TimeoutError) as e:  # a loop already closed, or wedged
            log.warning("dashboard: closing: %r", e)


def start_dashboard(
    listen: str,
    board: Board,
    servers: Callable[[], Sequence[str]],
    tubes: Callable[[str], list[str]],
    drain: Callable[[], None],
    token: str | None,
    connections: Callable[[], list[dict[str, Any]]],
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    allow_hosts: Iterable[str] = (),
    loop: asyncio.AbstractEventLoop | None = None,
) -> Dashboard:
    """A dashboard on ``listen`` for the supervisor of ``tubes(server)`` on ``servers()``
    (``host:port`` each, the first one first; asked again at each look, as a reload may
    change them), on ``loop`` or its own. ValueError for a malformed ``listen`` or
    ``allow_hosts``, OSError when it cannot be bound."""
    queues = Queues(servers, tubes)
    return Dashboard(listen, board, queues, Actions(servers, tubes, drain), token,
                     connections, metrics, allow_hosts, loop)  # fmt: skip


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _json_rendering(part: Callable[[], Any]) -> Rendered:
    return json.dumps(part()).encode("ascii"), "application/json"


def _part(path: str) -> str:
    """The snapshot part ``path`` asks for ("" for none): ``/api/NAME`` or ``/metrics``."""
    if path == "/metrics":
        return "metrics"
    name = path[len("/api/"):] if path.startswith("/api/") else ""
    return name if name != "metrics" else ""


def _with_allow(response: Response, allow: str) -> Response:
    return Response(response.status, response.body, response.content_type, {"Allow": allow})
