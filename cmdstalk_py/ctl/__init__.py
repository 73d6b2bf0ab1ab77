"""``cmdstalk-ctl``: an operator's shell tool for beanstalkd and cmdstalk supervisors.

Modules:

- ``cli``: the ``cmdstalk-ctl`` group (click): ``--address a,b``, ``--timeout``, the exit
  codes, and the registration of every command below.
- ``servers``: connections to each server, the errors that map to exit codes (1 not found,
  3 a server unreachable, refusing, or sending what ctl cannot trust).
- ``beanstalk``: the beanstalkd commands ctl sends, one method each.
- ``wire``: a connection's bytes, bounded: a deadline per whole reply, capped lines and
  data blocks, strict CRLF framing.
- ``replies``: pure parsers of reply lines and stats YAML; the one table of error words;
  ``ServerFault``, the one error for whatever a server does wrong.
- ``text``: what reaches a terminal: control characters escaped, job bodies previewed as
  text or hex, tables cut to the terminal's width, JSON that is pure ASCII.
- ``read``: the read commands: ``stats``, ``tubes``, ``peek``, ``show`` (``--events``: a
  job's last outcome, and what it cost, from the event log).
- ``top``: ``top``, every tube's jobs by state and rates, refreshed in place.
- ``write``: single changes: ``put``, ``kick``, ``kick-job``, ``delete``, ``pause``.
- ``bulk``: ``clear`` and ``move``: many jobs of one state, confirmed, with progress.
- ``follow``: ``tail`` (the event log, followed) and ``workers`` (supervisors' dashboards).
"""
