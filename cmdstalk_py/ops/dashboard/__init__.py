"""The supervisor's live dashboard, ``cmdstalk --http HOST:PORT`` (stdlib only).

Imported only when ``--http`` is given: ``cmdstalk --help`` and a supervisor without it never
load ``http.server``.

Modules:

- ``board``: ``Board``, the Observer that keeps what the page shows about jobs: the
  running ones (pool, pid, elapsed against the limit that applies: TTR, max runtime or
  none; last output lines) and the latest finished ones.
- ``queues``: ``QueueView``, stats-tube of the supervisor's tubes on the dashboard's own
  connection to one server, with rates; polled only when a page or ``/api`` asks, at most
  once a second. ``Queues``: a view per server the supervisor serves now (a reload may
  add or drop one), asked in parallel, each server's reachability on its own.
- ``actions``: ``Actions``, what a token holder may do: kick a buried job, delete a job,
  pause a tube (each on a server it names, one the supervisor serves), drain this
  supervisor.
- ``server``: ``Dashboard``: the ``ThreadingHTTPServer``, its routes (``/``, ``/static/…``,
  ``/api/…``, ``/metrics``), the token check and the browser-facing headers.
- ``static/``: the page, its script and its style, served from the package (no CDN).
"""

from cmdstalk_py.ops.dashboard.server import Dashboard, start_dashboard

__all__ = ["Dashboard", "start_dashboard"]
