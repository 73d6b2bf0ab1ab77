#!/usr/bin/env python3
"""Put jobs into a beanstalkd tube (any beanstalkd-protocol server: beanstalkd, cmdstalk-server).

    python examples/produce.py --address 127.0.0.1:11300 --tube hello.sh Alice Bob
    printf '{"numbers": [1, 2]}\\n' | python examples/produce.py --tube json_worker.py --stdin-lines

Each PAYLOAD argument (or each stdin line with ``--stdin-lines``) becomes one job. Prints
the job ids it got, one per line.
"""

from __future__ import annotations

import argparse
import sys

import greenstalk

from cmdstalk_py.supervisor import config


def parse_address(text: str) -> tuple[str, int]:
    """cmdstalk's own address rule, as an argparse type (a clear one-line error)."""
    try:
        return config.parse_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def tube_name(text: str) -> str:
    try:
        return config.validate_tube(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Put jobs into a beanstalkd tube.")
    parser.add_argument("--address", type=parse_address, default=("127.0.0.1", 11300),
                        help="server HOST:PORT (default 127.0.0.1:11300)")
    parser.add_argument("--tube", type=tube_name, default="default",
                        help="tube to put the jobs in")
    parser.add_argument("--priority", type=int, default=greenstalk.DEFAULT_PRIORITY,
                        help="0 is the most urgent (default 65536)")
    parser.add_argument("--delay", type=int, default=0, help="seconds before a job is ready")
    parser.add_argument("--ttr", type=int, default=60, help="time to run, seconds (default 60)")
    parser.add_argument("--stdin-lines", action="store_true",
                        help="one job per line of stdin (in addition to PAYLOAD arguments)")
    parser.add_argument("payloads", nargs="*", metavar="PAYLOAD", help="job bodies")
    args = parser.parse_args(argv)

    bodies = [p.encode() for p in args.payloads]
    if args.stdin_lines:
        bodies += [line.rstrip(b"\n") for line in sys.stdin.buffer if line.strip()]
    if not bodies:
        parser.error("no payloads: give PAYLOAD arguments or --stdin-lines")
    with greenstalk.Client(args.address, encoding=None, use=args.tube) as client:
        for body in bodies:
            job_id = client.put(body, priority=args.priority, delay=args.delay, ttr=args.ttr)
            print(job_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
