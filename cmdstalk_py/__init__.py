"""cmdstalk-py: beanstalkd jobs as unix processes, and a beanstalkd-compatible server."""

__version__ = "0.1.0"
