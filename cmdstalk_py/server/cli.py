"""The ``cmdstalk-server`` command line; filled in by the server issue."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="cmdstalk-server", description="A beanstalkd 1.12-compatible queue server."
    )
    parser.parse_args(argv)
    sys.exit("cmdstalk-server: the server is not implemented yet")
