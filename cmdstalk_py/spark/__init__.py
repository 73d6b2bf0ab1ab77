"""cmdstalk on Spark: enqueue DataFrames, analyse event logs, export dead letters, drain.

Installed with the ``spark`` extra (pyspark, pyarrow, pandas, matplotlib) and imported only
when used: nothing here is imported by the ``cmdstalk`` supervisor or ``cmdstalk-server``.
The modules ``wire`` and ``putter`` (the beanstalkd socket code) need no Spark at all.
"""
