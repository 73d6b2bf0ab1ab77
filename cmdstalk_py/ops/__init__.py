"""Operating the supervisor: what it tells the outside world about its jobs.

Modules:

- ``observers``: ``Observer`` (no-op hooks the supervisor calls from broker threads:
  results, job starts with their pid, output lines, a tube held back (``TubeHold``), …)
  and ``Observers``, the fan-out to every sink below.
- ``logsetup``: stderr logging, text (``[tube:slot] job N …``) or JSON lines.
- ``logsink``: ``SinkHandler``, the handler that never blocks a broker: a bounded queue,
  one writer thread, lines dropped, counted and reported when the sink stalls.
- ``eventlog``: ``EventLog``, the JSON-lines event log (job records schema v2, tube
  held/servable records v3), reopened for logrotate.
- ``holdsettle``: ``HoldSettler``, which held-back / servable changes of a tube the event
  log writes (a servable that is held again within a second is not), and ``HoldLog``, the
  log lines of the same changes.
- ``appendfile``: ``AppendFile``, a file that takes whole lines or nothing, private, that
  follows logrotate (the event log's file).
- ``sinkqueue``: ``SinkQueue``, a bounded queue drained by one writer thread: how every
  sink above is written without a broker waiting for it.
- ``metrics``: Prometheus metrics (prometheus-client, imported only with ``--metrics``, or
  with ``--http`` when it is installed).
- ``dashboard/``: the live dashboard of ``--http`` (stdlib ``http.server``, imported only
  with ``--http``): running and finished jobs, queues, connections, ``/api``, actions.
- ``systemd``: ``SystemdNotifier``, the notify protocol (READY, STOPPING, WATCHDOG, STATUS).
"""
