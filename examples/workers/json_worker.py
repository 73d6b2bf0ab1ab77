#!/usr/bin/env python3
"""Reads a JSON payload {"numbers": [...]} and prints their sum.

A payload that is not valid JSON can never succeed: exit 65 (EX_DATAERR) so that cmdstalk
run with ``--bury-exit-codes 65`` buries it at once instead of retrying it.
"""

import json
import sys

try:
    job = json.load(sys.stdin)
    numbers = [float(n) for n in job["numbers"]]
except (ValueError, KeyError, TypeError) as exc:
    print(f"bad payload: {exc}", file=sys.stderr)
    sys.exit(65)
print(json.dumps({"sum": sum(numbers), "count": len(numbers)}))
