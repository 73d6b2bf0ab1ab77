"""Talking to a beanstalkd server as a client.

Modules:

- ``names``: the project's one tube-name rule, ``host:port`` parser and check of a put's
  numbers (stdlib only: the server and the command lines import it without pulling in a
  client);
- ``errors``: the exception classes and ``ERROR_REPLIES``, the one table from reply words
  to them; ``CONNECTION_ERRORS``, what an unusable connection raises;
- ``replies``: pure parsers of reply lines, stats YAML and lists;
- ``reader``: reply lines and data blocks off a socket, the kernel-enforced I/O timeout;
- ``pipeline``: ``Client``, a small blocking client whose raw reads and writes serve
  callers that pipeline many commands (the Spark putter and dead-letter export);
- ``framing``: sans-IO reply framing (bytes in, whole replies out, every read bounded);
- ``aio``: ``AsyncClient``, a connection on the project's event loop
  (``cmdstalk_py.loop``) whose commands return futures (pipelined when several are sent
  before one is awaited): the supervisor's;
- ``outage``: ``OutageReporter``, one warning (with a hint) per server outage, shared by
  every connection to that server;
- ``connection``: ``HealingConnection``, an ``AsyncClient`` that reconnects with backoff
  (tenacity) and restores its use/watch state.

greenstalk serves everything else that needs no pipelining (and is the tests' oracle).
"""
