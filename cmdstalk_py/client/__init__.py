"""Talking to a beanstalkd server as a client.

Modules:

- ``connection``: ``HealingConnection``, a connection that reconnects with backoff
  (tenacity) and restores its use/watch state; the pipelining reader and reply parsers
  the broker's hot path uses.
"""
