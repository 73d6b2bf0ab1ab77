"""cmdstalk on Spark: enqueue DataFrames, analyse event logs, export dead letters, drain.

Installed with the ``spark`` extra (pyspark, pyarrow, pandas, matplotlib) and imported only
when used: nothing here is imported by the ``cmdstalk`` supervisor or ``cmdstalk-server``.

Modules:

- ``cli``: the ``cmdstalk-spark`` command line (Spark imported inside each command);
  ``session``: a local-friendly SparkSession; ``progress``: progress lines on a terminal;
  ``errors``: one line for a Spark failure (the innermost cause).
- ``datasource``: the ``beanstalkd`` data source, ``enqueue``, ``enqueue_stream`` and
  ``with_idempotency_key``; ``writeresult``: per-partition commit messages, the write's
  summary and ``EnqueueFailed`` (failed puts are not retried by Spark); ``putter``:
  pipelined puts in bounded windows (no Spark; the protocol itself is
  ``cmdstalk_py.client``'s); ``inputs``: ``enqueue``'s input files (RFC 4180 CSV, checked
  strictly before any job is put).
- ``eventlog``: reading the supervisor's event log (schema v1) with a fixed schema;
  ``report``: metrics per tube and window and the files ``report`` writes; ``charts``:
  its PNG charts and HTML page.
- ``deadletters``: buried jobs to Parquet and back.
- ``drain``: cmdstalk's own brokers run as Spark tasks, results as event-log rows.
"""
