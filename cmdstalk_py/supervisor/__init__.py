"""The supervisor, ``cmdstalk``: reserve jobs, run each as a process, act on its exit.

Modules, from the command line inwards:

- ``cli``: the ``cmdstalk`` command line (click), every option also from ``CMDSTALK_*``;
  ``goflags`` rewrites Go cmdstalk's spellings (``-all -per-tube=6``) before click parses.
- ``configmode``: ``--config FILE [--check]``: refuse pool flags beside it, print or run.
- ``poolfile``: the TOML config file → one ``Config`` per pool, each key checked by its
  flag's own type; one error line naming the file and the key.
- ``config``: ``Config``, the one frozen value every part takes, its defaults and parsers.
- ``numbers``: the bounds of every numeric option (finite, never absurd), as click types.
- ``wiring``: ``run_supervisor``: logging, observers, ``--embedded``, then the lifecycle.
- ``lifecycle``: ``Supervisor``: STARTING → RUNNING → DRAINING → STOPPED, signals, shutdown.
- ``dispatcher``: which brokers exist (``--tubes``, ``--all`` discovery), one thread each.
- ``broker``: one connection, one tube: reserve, stats-job, run, delete/release/bury.
- ``cmdcheck``: a command that cannot run (exit 126/127, no shell): one ERROR per broker.
- ``policy``: pure decisions: precheck, release backoff, bury, the TTR kill schedule.
- ``budget``: ``--max-jobs`` shared by every broker.
- ``results``: ``JobResult`` and ``Outcome``, the contract with the event log and Spark.
- ``joblog``: the log lines a broker writes about its jobs and their output.

The command itself runs in ``cmdstalk_py.process``; the server connection is
``cmdstalk_py.client``; logs, the event log, metrics and systemd are ``cmdstalk_py.ops``.
"""
