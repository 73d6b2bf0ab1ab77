"""``python -m cmdstalk_py.server``: the same as ``cmdstalk-server``."""

from cmdstalk_py.server.cli import main

main()
