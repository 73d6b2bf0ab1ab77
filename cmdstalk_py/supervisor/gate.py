"""Per-tube limits and rates of one pool: which tubes a worker may watch right now.

A limited tube's jobs are never reserved and then released (that would add to their
``releases``): a worker simply does not watch a tube it may not start a job of. Before
each reserve a worker asks ``Gate.claim`` for its watch set; every tube in it is a *claim*,
held while the worker waits in reserve:

- limit: ``running(tube) + claims(tube) <= limit(tube)``, so however the server hands out
  jobs to the workers waiting, the limit is never exceeded, not even briefly;
- rate: a token bucket per tube (``TokenBucket``); a tube is watched only while its
  bucket holds a token for every claim plus this one, so the starts never outrun it.

A reserve that returns a job of tube T turns the worker's claim on T into a running job
(``started``) and gives its other claims back. A tube that becomes servable while nobody
waits on it (a rate token came) is reported by ``wakes``: the pool then interrupts one
worker blocked in reserve, which claims again. Limits and claims count over the whole pool
(every server); claims are kept per server, so a tube is never left unwatched on one.
The clock is passed in (``now``): the tests drive it by hand. The gate lives on the
supervisor's event loop and has one owner there, so it takes no lock: a worker with
nothing to watch registers a wake-up (``subscribe``), called at the next change.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

Key = Hashable  # one worker


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` kept; starts full."""

    rate: float
    burst: float
    tokens: float
    stamp: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        return cls(rate, burst, burst, now)

    def available(self, now: float) -> float:
        return min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)

    def take(self, now: float) -> None:
        """One start; the bucket may go below zero only if a caller broke the claim rule."""
        self.tokens = self.available(now) - 1
        self.stamp = now

    def time_until(self, need: float, now: float) -> float:
        """Seconds until ``need`` tokens are there (inf if the burst cannot hold them)."""
        if need > self.burst:
            return math.inf
        return max(0.0, (need - self.available(now)) / self.rate)


def servable(running: int, claims: int, limit: int | None, tokens: float | None) -> bool:
    """Whether one more worker may wait on a tube (the watch-set rule)."""
    if limit is not None and running + claims + 1 > limit:
        return False
    return tokens is None or tokens - claims >= 1


def hold_reason(running: int, claims: int, limit: int | None, tokens: float | None) -> str | None:
    """Why a tube takes no new watcher: ``"limit"``, ``"rate"``, or None (servable)."""
    if limit is not None and running + claims + 1 > limit:
        return "limit"
    if tokens is not None and tokens - claims < 1:
        return "rate"
    return None


class Gate:
    """The running jobs, claims and buckets of one pool (on the event loop).

    ``limits``: tube → most running jobs; ``rates``: tube → (starts per second, burst).
    ``on_change(tube, reason)`` is called (outside the lock) when a tube becomes held back
    (``"limit"`` / ``"rate"``) or servable again (None).
    """

    def __init__(
        self,
        limits: Mapping[str, int],
        rates: Mapping[str, tuple[float, float]],
        now: float,
        on_change: Callable[[str, str | None], None] | None = None,
        on_count: Callable[[str, int], None] | None = None,
    ) -> None:
        self.limits = dict(limits)
        self._buckets = {t: TokenBucket.full(r, b, now) for t, (r, b) in rates.items()}
        self.running: Counter[str] = Counter()
        self._claims: Counter[tuple[object, str]] = Counter()  # (server, tube)
        self._held: dict[Key, tuple[object, tuple[str, ...]]] = {}
        self._waiting: dict[Key, object] = {}  # workers with nothing to watch, by server
        self._woken: set[tuple[object, str]] = set()
        self._reasons: dict[str, str | None] = {}
        self.on_change = on_change
        self.on_count = on_count
        self._subscribers: list[Callable[[], None]] = []

    def reconfigure(
        self, limits: Mapping[str, int], rates: Mapping[str, tuple[float, float]], now: float
    ) -> None:
        """New limits and rates (a reload); running jobs and claims are kept, and a bucket
        whose rate is unchanged keeps its tokens."""
        self.limits = dict(limits)
        old = self._buckets
        self._buckets = {}
        for tube, (rate, burst) in rates.items():
            bucket = old.get(tube)
            if bucket is None or (bucket.rate, bucket.burst) != (rate, burst):
                bucket = TokenBucket.full(rate, burst, now)
            self._buckets[tube] = bucket
        # A held tube whose limit and rate are gone is servable now, and says so: no
        # job of it will report the change (metrics and the event log would keep
        # "held" for good).
        freed = [
            tube
            for tube, reason in self._reasons.items()
            if reason is not None and tube not in self.limits and tube not in self._buckets
        ]
        for tube in freed:
            self._reasons[tube] = None
        self.notify()
        if self.on_change is not None:
            for tube in freed:
                self.on_change(tube, None)

    @property
    def active(self) -> bool:
        """Any limit or rate at all (else every claim is every candidate)."""
        return bool(self.limits or self._buckets)

    def _claims_of(self, tube: str) -> int:
        return sum(n for (_, t), n in self._claims.items() if t == tube)

    def _tokens(self, tube: str, now: float) -> float | None:
        bucket = self._buckets.get(tube)
        return None if bucket is None else bucket.available(now)

    def _reason(self, tube: str, now: float) -> str | None:
        if tube not in self.limits and tube not in self._buckets:
            return None  # the common case, asked before every reserve: nothing to count
        return hold_reason(
            self.running[tube], self._claims_of(tube), self.limits.get(tube),
            self._tokens(tube, now),
        )  # fmt: skip

    def _drop(self, key: Key) -> None:
        server, tubes = self._held.pop(key, (None, ()))
        for tube in tubes:
            self._claims[server, tube] -= 1
            if self._claims[server, tube] <= 0:
                del self._claims[server, tube]
            self._woken.discard((server, tube))
        self._waiting.pop(key, None)

    # -- the workers' side ----------------------------------------------------------------

    def claim(
        self, key: Key, server: object, candidates: Iterable[str], now: float
    ) -> tuple[str, ...]:
        """The tubes ``key`` may watch now (claimed until it ``started`` or ``release``s)."""
        self._drop(key)
        if self._woken:  # this server's tubes are looked at afresh: wake-ups answered
            self._woken = {pair for pair in self._woken if pair[0] != server}
        chosen = tuple(t for t in candidates if self._reason(t, now) is None)
        for tube in chosen:
            self._claims[server, tube] += 1
        if chosen:
            self._held[key] = (server, chosen)
        else:
            self._waiting[key] = server
        self._report(candidates, now)
        return chosen

    def started(self, key: Key, tube: str, now: float) -> None:
        """``key`` reserved a job of ``tube``: its claim on it becomes a running job."""
        self._drop(key)
        self.running[tube] += 1
        bucket = self._buckets.get(tube)
        if bucket is not None:
            bucket.take(now)
        self.notify()
        self._report((tube,), now)

    def finished(self, tube: str, now: float) -> None:
        """A job of ``tube`` is over (its command ended)."""
        self.running[tube] -= 1
        if self.running[tube] <= 0:
            del self.running[tube]
        self.notify()
        self._report((tube,), now)

    def release(self, key: Key) -> None:
        """``key`` left reserve without a job (or stopped): its claims go back."""
        self._drop(key)
        self.notify()

    def next_change(
        self, candidates: Iterable[str], now: float, callback: Callable[[], None]
    ) -> float | None:
        """For a worker with nothing to watch: None if a candidate is servable now;
        otherwise ``callback`` is registered for the next change (``notify``), and the
        result is the seconds until a rate-held candidate's next token (inf: none)."""
        tubes = tuple(candidates)
        if any(self._reason(t, now) is None for t in tubes):
            return None
        self._subscribers.append(callback)
        return self._next_token(tubes, now)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, at the next change (the pool's waker)."""
        self._subscribers.append(callback)

    def notify(self) -> None:
        """A change (a job started or ended, claims went back, a reload, a stop): call
        every registered wake-up once."""
        if self._subscribers:
            subscribers, self._subscribers = self._subscribers, []
            for callback in subscribers:
                callback()

    # -- the pool's side ------------------------------------------------------------------

    def _next_token(self, candidates: Iterable[str], now: float) -> float:
        """Seconds until a rate-held tube of ``candidates`` takes one more claim."""
        best = math.inf
        for tube in candidates:
            bucket = self._buckets.get(tube)
            if bucket is not None and self._reason(tube, now) == "rate":
                best = min(best, bucket.time_until(self._claims_of(tube) + 1, now))
        return best

    def wakes(
        self, candidates: Mapping[object, Iterable[str]], now: float
    ) -> tuple[list[tuple[object, str]], float]:
        """Tubes servable on a server where no worker waits for them and none is about to
        claim: (``(server, tube)`` pairs to wake a reserving worker for, seconds until the
        next check is due (inf: only a change can make one)).
        """
        out: list[tuple[object, str]] = []
        due = math.inf
        for server, tubes in candidates.items():
            tubes = tuple(tubes)
            due = min(due, self._next_token(tubes, now))
            if server in self._waiting.values():
                continue  # a waiting worker of this server is notified of every change
            for tube in tubes:
                pair = (server, tube)
                if self._claims[pair] or pair in self._woken:
                    continue
                if self._reason(tube, now) is None:
                    self._woken.add(pair)
                    out.append(pair)
        return out, due

    def state(
        self, tubes: Iterable[str], now: float
    ) -> dict[str, tuple[int, int | None, str | None]]:
        """Per tube: (running jobs, limit, hold reason) for metrics and logs."""
        return {t: (self.running[t], self.limits.get(t), self._reason(t, now)) for t in tubes}

    def _report(self, tubes: Iterable[str], now: float) -> None:
        if not (self.limits or self._buckets):  # ``active``, asked three times a job
            return
        changes = []
        counts = []
        for tube in tubes:
            if tube not in self.limits and tube not in self._buckets:
                continue
            counts.append((tube, self.running[tube]))
            reason = self._reason(tube, now)
            # A tube whose every slot is claimed by waiting workers is served, not held.
            if reason == "limit" and self.running[tube] < self.limits[tube]:
                reason = None
            if reason == "rate" and self._claims_of(tube):
                reason = None
            if self._reasons.get(tube) != reason:
                self._reasons[tube] = reason
                changes.append((tube, reason))
        if self.on_count is not None:
            for tube, running in counts:
                self.on_count(tube, running)
        if self.on_change is not None:
            for tube, reason in changes:
                self.on_change(tube, reason)
