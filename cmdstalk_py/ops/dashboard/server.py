"""``Dashboard``: the supervisor's HTTP endpoint (``--http``): the page, ``/api``, actions.

Routes: ``GET /`` the page, ``/static/…`` its script and style (from the package),
``/api/state`` everything the page shows, ``/api/running``, ``/api/finished``,
``/api/tubes``, ``/api/connections`` its parts, ``/metrics`` (with prometheus-client);
``POST /api/actions/{kick,delete,pause,drain}`` with ``X-Cmdstalk-Token``; kick, delete
and pause take ``server`` (``host:port``, one the supervisor serves; optional with one).

What a page shows comes from jobs, which are attacker-controlled: the page builds every
element with ``textContent`` and the Content-Security-Policy allows no inline script and
nothing from elsewhere. Actions are refused (403) without a configured token, with a wrong
one, and by any method but POST; a custom header means another site's page cannot send
one (it would need a CORS preflight, which this server never grants). On a loopback
address, a ``Host`` other than a loopback name is refused (DNS rebinding).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from cmdstalk_py.ops.dashboard.actions import ActionError, Actions
from cmdstalk_py.ops.dashboard.board import Board
from cmdstalk_py.ops.dashboard.queues import Queues
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
TOKEN_HEADER = "X-Cmdstalk-Token"
MAX_BODY = 4096
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


class Dashboard(Observer):
    """Serves the dashboard on ``listen`` (HOST:PORT, ``:PORT`` = 127.0.0.1) until closed.

    ``board`` must be added to the supervisor's observers (``start_dashboard`` does not);
    ``connections()`` lists the brokers' connections; ``metrics`` renders ``/metrics``.
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
    ) -> None:
        host, port = parse_hostport(listen)
        self.board, self.queues, self.actions = board, queues, actions
        self.token = token or None
        self.connections = connections
        self.metrics = metrics
        self._server = _Server((host, port), self)
        bound = self._server.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        self.loopback = host in LOOPBACK_NAMES or host.startswith("127.")
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cmdstalk-dashboard", daemon=True
        )
        self._thread.start()

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
            "running": self.board.running(),
            "finished": self.board.finished(),
            "queue": self.queues.snapshot(),
            "connections": self.connection_states(),
        }

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

    def act(self, name: str, body: dict[str, Any]) -> str:
        """Carry out action ``name``; ``ActionError`` when refused or failed."""
        try:
            server = body.get("server")
            if server is not None and not isinstance(server, str):
                raise ValueError("server must be a string, host:port")
            if name == "kick":
                return self.actions.kick(int(body["job_id"]), server)
            if name == "delete":
                return self.actions.delete(int(body["job_id"]), server)
            if name == "pause":
                return self.actions.pause(str(body["tube"]), int(body["seconds"]), server)
        except (KeyError, TypeError, ValueError) as e:
            raise ActionError(400, f"bad request: {e}") from None
        except OSError as e:
            raise ActionError(502, f"server connection failed: {e}") from None
        if name == "drain":
            return self.actions.drain()
        raise ActionError(404, f"no action {name}")

    def close(self) -> None:
        """Stop serving (the supervisor has stopped)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.queues.close()


def start_dashboard(
    listen: str,
    board: Board,
    servers: Callable[[], Sequence[str]],
    tubes: Callable[[str], list[str]],
    drain: Callable[[], None],
    token: str | None,
    connections: Callable[[], list[dict[str, Any]]],
    metrics: Callable[[], tuple[bytes, str]] | None = None,
) -> Dashboard:
    """A dashboard on ``listen`` for the supervisor of ``tubes(server)`` on ``servers()``
    (``host:port`` each, the first one first; asked again at each look, as a reload may
    change them). ValueError for a malformed ``listen``, OSError when it cannot be bound."""
    queues = Queues(servers, tubes)
    return Dashboard(listen, board, queues, Actions(servers, tubes, drain), token,
                     connections, metrics)  # fmt: skip


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a page left open must not hold up the supervisor's exit

    def __init__(self, address: tuple[str, int], dashboard: Dashboard) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.dashboard = dashboard
        super().__init__(address, _Handler)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` → ``[::1]``)."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0]


class _Handler(BaseHTTPRequestHandler):
    server_version = "cmdstalk-dashboard"
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may sit silent: an idle keep-alive frees its thread

    @property
    def dashboard(self) -> Dashboard:
        assert isinstance(self.server, _Server)
        return self.server.dashboard

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        for name, value in HEADERS.items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode("ascii"), "application/json")

    def _host_ok(self) -> bool:
        if not self.dashboard.loopback:
            return True
        host = host_name(self.headers.get("Host") or "")
        return host in LOOPBACK_NAMES or host.startswith("127.")

    def do_GET(self) -> None:
        if not self._host_ok():
            self._json(403, {"error": "unexpected Host header"})
            return
        path = self.path.split("?", 1)[0]
        if path in STATIC:
            name, content_type = STATIC[path]
            data = resources.files(__package__).joinpath("static", name).read_bytes()
            self._send(200, data, content_type)
        elif path.startswith("/api/actions/"):
            self._json(405, {"error": "actions take POST"})
        elif path.startswith("/api/"):
            self._api(path[len("/api/"):])
        elif path == "/metrics" and self.dashboard.metrics is not None:
            body, content_type = self.dashboard.metrics()
            self._send(200, body, content_type)
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET

    def _api(self, name: str) -> None:
        d = self.dashboard
        parts: dict[str, Callable[[], Any]] = {
            "state": d.state,
            "running": d.board.running,
            "finished": d.board.finished,
            "tubes": d.queues.snapshot,
            "connections": d.connection_states,
        }
        if name not in parts:
            self._json(404, {"error": "not found"})
            return
        self._json(200, parts[name]())

    def do_POST(self) -> None:
        if not self._host_ok():
            self._json(403, {"error": "unexpected Host header"})
            return
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        if not path.startswith("/api/actions/") or not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._json(404 if length <= MAX_BODY else 413, {"error": "not found"})
            return
        raw = self.rfile.read(length)
        token = self.dashboard.token
        given = self.headers.get(TOKEN_HEADER) or ""
        if token is None:
            self._json(403, {"error": "actions are disabled (start cmdstalk with --http-token)"})
            return
        if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8")):
            self._json(403, {"error": "wrong or missing token"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ActionError(400, "bad request: expected a JSON object")
            message = self.dashboard.act(path[len("/api/actions/"):], body)
        except ValueError:
            self._json(400, {"error": "bad request: not JSON"})
        except ActionError as e:
            self._json(e.status, {"error": str(e)})
        else:
            log.warning("dashboard action: %s", message)
            self._json(200, {"ok": True, "message": message})
