"""The supervisor, ``cmdstalk``: reserve jobs, run each as a process, act on its exit.

Modules, from the command line inwards:

- ``cli``: the ``cmdstalk`` command line (click), every option also from ``CMDSTALK_*``;
  each other concern's options are one decorator of their own module: ``embedflags``
  (``--embedded``, ``--binlog*``), ``opsflags`` (logs, ``--events``, ``--metrics``,
  ``--http``), ``poolflags`` (``--workers``, ``--tube-limit``/``--tube-rate``,
  ``--config``/``--check``), ``fateflags`` (``--on-exit``, ``--keep-alive``, …), all
  built with ``flagkit`` (env var, parser errors as usage errors);
  ``goflags`` rewrites Go cmdstalk's spellings (``-all -per-tube=6``) before click parses.
- ``configmode``: ``--config FILE [--check]``: refuse pool flags beside it, print or run.
- ``poolfile``: the TOML config file → one ``Config`` per pool, each key checked by its
  flag's own type; one error line naming the file and the key. ``fileread`` reads the file
  (one regular file, links resolved once, bounded, never blocking: SIGHUP reads it off
  the event loop, in its executor); ``tomlread``: its bytes → TOML tables in bounded
  time (UTF-8, nesting, key depth); ``overlaps``: two pools serving one tube on one
  server; ``keytext``: a key or a value as an error line or ``--check`` shows it (TOML
  form, escapes escaped).
- ``config``: ``Config``, the one frozen value every part takes, its defaults and parsers.
- ``numbers``: the bounds of every numeric option (finite, never absurd), as click types.
- ``extras``: ``Extras``, the options that wire things around the supervisor.
- ``wiring``: ``run_supervisor``: logging, observers, ``--embedded``, then the lifecycle.
- ``lifecycle``: ``Supervisor``: STARTING → RUNNING → DRAINING → STOPPED on one event
  loop (``cmdstalk_py.loop``, shared with the server), signals, shutdown, SIGHUP reload,
  the loop's lag; ``looptime``: how long the loop is held, bursts, the main sleep.
- ``dispatcher``: which pools run (one ``Config`` each) and a reload's switch-over.
- ``pool``: one pool's workers on each of its servers (``--workers`` shared, or
  ``--per-tube``), a task each on the loop; the waker for limits and rates.
- ``discovery``: ``--all`` and globs: ``list-tubes`` per server (a task), tubes that are
  gone (``CheckPlan``: which tubes are asked ``stats-tube`` when).
- ``gate``: per-tube limits and rates: which tubes a worker may watch (pure rules, token
  bucket); ``watchplan``: a worker's candidate tubes joined with its pool's gate.
- ``broker``: a worker's coroutine: one connection, its watch set, the reserve (plain when
  idle, cut short by closing the connection); ``brokerjob``: one job top to bottom:
  stats-job, precheck, run, decide, delete/release/bury (``JobHandler``);
  ``standalone``: brokers on a thread's own loop (tests, a Spark task).
- ``jobrun``: one job beside its command: the deadline (``--keep-alive`` touches,
  ``--max-runtime``), the command's control requests, the decision at its end.
- ``cmdcheck``: a command that cannot run (exit 126/127, no shell): one ERROR per broker.
- ``policy``: pure decisions: precheck, release backoff and jitter, exit-code actions,
  the timeout policy, the TTR kill schedule; each decision names its rule (``Reason``).
- ``budget``: ``--max-jobs`` shared by every broker.
- ``results``: ``JobResult`` and ``Outcome``, the contract with the event log and Spark.
- ``joblog``: the log lines a broker writes about its jobs and their output; ``jobcost``:
  what a job's tree cost, in words (the log line's and ``cmdstalk-ctl``'s).

The command itself runs in ``cmdstalk_py.process``; the server connection is
``cmdstalk_py.client``; logs, the event log, metrics and systemd are ``cmdstalk_py.ops``.
"""
