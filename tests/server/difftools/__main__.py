"""``python -m tests.server.difftools [NAME-SUBSTRING ...]``: run scenarios, print mismatches."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tests.server.difftools.runner import other_kind, run_pair
from tests.server.difftools.scenarios import SCENARIOS


def main(argv: list[str]) -> int:
    chosen = [s for s in SCENARIOS if not argv or any(a in s.name for a in argv)]
    start = time.monotonic()
    bad = 0
    with ThreadPoolExecutor(2) as pool:
        for sc in chosen:
            res = run_pair(sc, pool)
            if res.problems():
                bad += 1
                print(res.report(), "\n")
            else:
                print(f"ok  {sc.name} ({max(res.real.seconds, res.other.seconds):.2f}s)")
    print(f"{len(chosen)} scenarios against {other_kind()}, {bad} with problems, "
          f"{time.monotonic() - start:.1f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
