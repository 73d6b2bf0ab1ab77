"""The bundled beanstalkd-compatible queue server, ``cmdstalk-server``.

Modules, from the command line inwards:

- ``cli``, ``__main__``: the ``cmdstalk-server`` command line, which takes the binlog lock
  and listens before it loads anything heavy; ``flags``: its options (beanstalkd's), in one
  table read without imports, argparse built from it for ``-h`` and errors; ``config``: the
  server's settings and every default, once; ``standins``: ``NamedTuple`` and ``Enum`` for
  the serving modules without ``typing`` and ``enum`` (start-up time);
  ``assembly``: engine + journal/binlog + loop + ``net.Server``, built and closed in one
  place for both ``run`` (serving in the foreground with signals) and ``embedded``
  (``EmbeddedServer``, the same server on a background thread); ``durable``: opening the
  binlog (``-b``) and locking its directory early.
- ``listen``, ``net``, ``loop``: listening sockets (and the default address; a unix socket
  path is only ever replaced when stale), accepting connections and driving timers and
  the journal on one epoll event loop.
- ``conn``: ``ServerConn``, the server's end of one client connection: socket I/O, when
  it takes its turns (so that a pipelining client does not hold up the others), flow
  control (input limit, output high/low water), held ``-f 0`` replies, closing;
  ``conn_state``: its ``State`` enum and allowed transitions.
- ``framing``: the sans-IO ``Framer``: input bytes in, command events out (lines, put
  bodies, JOB_TOO_BIG skips, over-long lines); ``protocol``: command lines into ``verbs``
  values (the grammar); ``replies``: the reply-word table and rendering; ``scan``: 1.12's
  number scanning; ``limits``: protocol limits.
- ``commands``: the dispatcher: a command value in, one engine call, its reply bytes out
  (also the replies of reserves that waited); ``run_turn`` runs a connection's framed
  events through it within a turn's bounds (commands, reply bytes, time).
- ``engine``: the queue engine, driven by the caller's clock: every job state transition,
  answering with the job or an ``outcome``; ``waiters``: blocked reserves (who waits, in
  which order they are served, wake-ups for a timeout or DEADLINE_SOON, a half-close, the
  answers queued for the connections); ``pauses``: when a tube's pause starts and ends;
  ``store``: where a job sits for its state; ``alarms``: its timers; ``job``, ``tube``
  (tubes, the set of live tubes), ``ready``, ``heap``: its data structures; ``session``:
  a connection as the engine sees it (watch list, reservations and the soonest of them,
  the put whose body is on its way), and the DEADLINE_SOON rule; ``stats``: the YAML
  bodies of the stats commands.
- ``journal``: the durability hook; ``binlog/``: the write-ahead log behind it (``codec``:
  every record's bytes; ``segment``: segment files and live-job accounting).

``cmdstalk_py.server.EmbeddedServer`` is importable from here; it is loaded on first use so
that importing ``cmdstalk_py.server.limits`` stays light.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing, which ``cmdstalk-server`` would otherwise
# load before it listens (mypy knows the name).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from cmdstalk_py.server.embedded import EmbeddedServer

__all__ = ["EmbeddedServer"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedServer":
        from cmdstalk_py.server.embedded import EmbeddedServer

        return EmbeddedServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
