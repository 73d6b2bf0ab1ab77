#!/usr/bin/env python3
"""Fails on the first try, succeeds on the retry.

A non-zero exit makes cmdstalk release the job with a backoff delay of releases**4 seconds
(0 s after the first failure), so the second reservation comes at once; CMDSTALK_RELEASES
tells the command how often the job was released before.
"""

import os
import sys

payload = sys.stdin.buffer.read()
releases = int(os.environ.get("CMDSTALK_RELEASES", "0"))
if releases == 0:
    print(f"first try at {payload!r}: pretending the upstream is down", file=sys.stderr)
    sys.exit(1)
print(f"retry #{releases} worked for {payload!r}")
