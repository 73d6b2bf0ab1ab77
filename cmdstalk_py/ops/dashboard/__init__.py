"""The supervisor's live dashboard, ``cmdstalk --http HOST:PORT`` (stdlib only).

Imported only when ``--http`` is given: ``cmdstalk --help`` and a supervisor without it never
load any of it. It runs on an asyncio event loop (the caller's, or its own in one thread) and
may never cost the jobs anything: connections, descriptors, bytes, time, CPU and log lines
are all bounded.

Modules:

- ``board``: ``Board``, the Observer that keeps what the page shows about jobs: the
  running ones (pool, pid, elapsed against the limit that applies: TTR, max runtime or
  none; last output lines) and the latest finished ones (with what their trees cost).
- ``live``: ``LiveUsage``, the memory, CPU and processes of each running job's tree now,
  from one /proc scan at most every second, however many look, and never on the loop.
- ``queues``: ``QueueView``, stats-tube of the supervisor's tubes on the dashboard's own
  connection to one server, with rates; polled only when a page or ``/api`` asks, at most
  once a second. ``Queues``: a view per server the supervisor serves now (a reload may
  add or drop one), asked in parallel, each server's reachability on its own.
- ``actions``: ``Actions``, what a token holder may do: kick a buried job, delete a job,
  pause a tube (each on a server it names, one the supervisor serves), drain this
  supervisor.
- ``server``: ``Dashboard``: its routes (``/``, ``/static/…``, ``/api/…``, ``/metrics``),
  the token check, the browser-facing headers, the loop it runs on.
- ``listener``: ``Listener``, the HTTP/1.1 connections on the loop: accepts, reads a
  request, answers, keeps alive, each bounded.
- ``wire``: ``parse_head`` and ``render``: a request's bytes in, a response's bytes out (no
  socket).
- ``hosts``: ``HostCheck``, the ``Host`` headers answered (DNS rebinding).
- ``admission``: ``Admission`` (the connection cap, descriptors left for jobs) and
  ``Budget`` (accepts and requests per second).
- ``snapshots``: ``Snapshots``, each ``/api`` part rendered at most twice a second.
- ``offload``: ``Offload``, daemon threads for what blocks (stats, actions), awaited.
- ``throttle``: ``LogThrottle``, one log line per kind of client trouble per 10 s.
- ``static/``: the page, its script and its style, served from the package (no CDN).
"""

from cmdstalk_py.ops.dashboard.server import Dashboard, start_dashboard

__all__ = ["Dashboard", "start_dashboard"]
