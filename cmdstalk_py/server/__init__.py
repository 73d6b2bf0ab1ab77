"""The bundled beanstalkd-compatible queue server, ``cmdstalk-server``.

Modules, from the socket inwards:

- ``cli``, ``__main__``: the ``cmdstalk-server`` command line (beanstalkd's flags);
  ``run``: serving in the foreground with signals; ``embedded``: ``EmbeddedServer``, the
  same server on a background thread; ``durable``: starting with a binlog (``-b``).
- ``listen``, ``net``, ``loop``: listening sockets, connections on one epoll event loop,
  and its timers.
- ``conn``: one client connection: reading, flow control, output, closing;
  ``framing``: bytes into commands and replies (``protocol``, ``verbs``: the grammar
  and the command values; ``limits``: protocol limits).
- ``commands``: what each command does to the engine and the reply it gets.
- ``engine``: the queue engine, driven by the caller's clock; ``job``, ``tube``,
  ``ready``, ``heap``: its data structures; ``session``: a connection as the engine
  sees it; ``stats``: the YAML bodies of the stats commands.
- ``journal``: the durability hook; ``binlog/``: the write-ahead log behind it.

``cmdstalk_py.server.EmbeddedServer`` is importable from here; it is loaded on first use so
that importing ``cmdstalk_py.server.limits`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cmdstalk_py.server.embedded import EmbeddedServer

__all__ = ["EmbeddedServer"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedServer":
        from cmdstalk_py.server.embedded import EmbeddedServer

        return EmbeddedServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
