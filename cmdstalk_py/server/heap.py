"""A binary min-heap of jobs that know their position, so any can be removed in O(log n).

Keys live in a list parallel to the items so comparisons are done on plain ints or tuples
(C-level comparisons); each item's ``heap_index`` is kept up to date on every move.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from cmdstalk_py.server.job import Job

    #: What orders the items: (deadline, id) for delayed jobs.
    Key = tuple[float, int]


class Heap:
    """Min-heap of jobs (each with its ``heap_index``) by the key given when pushed.

    Only jobs go in (the delayed ones of a tube): typed for them, so that ``typing``'s
    generics stay out of the server's start-up.
    """

    __slots__ = ("items", "keys")

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.items: list[Job] = []

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def peek(self) -> Job | None:
        """The smallest item, left in place."""
        return self.items[0] if self.items else None

    def peek_key(self) -> Key:
        """The smallest key (the heap must not be empty)."""
        return self.keys[0]

    def push(self, key: Key, item: Job) -> None:
        """Insert ``item`` ordered by ``key``."""
        self.keys.append(key)
        self.items.append(item)
        self._up(len(self.items) - 1, key, item)

    def pop(self) -> Job:
        """Remove and return the smallest item (the heap must not be empty)."""
        items = self.items
        keys = self.keys
        top = items[0]
        last_key = keys.pop()
        last = items.pop()
        n = len(keys)
        if n:
            # Bottom-up: walk the hole down along the smaller children to a leaf, then let
            # the last item rise from there. The last item usually belongs near the bottom,
            # so this saves a comparison per level over sifting it down from the root.
            pos = 0
            child = 1
            while child < n:
                right = child + 1
                if right < n and keys[right] < keys[child]:
                    child = right
                keys[pos] = keys[child]
                moved = items[child]
                items[pos] = moved
                moved.heap_index = pos
                pos = child
                child = 2 * pos + 1
            self._up(pos, last_key, last)
        top.heap_index = -1
        return top

    def remove(self, item: Job) -> None:
        """Remove ``item``, which must be in this heap."""
        i = item.heap_index
        keys = self.keys
        items = self.items
        old_key = keys[i]
        last_key = keys.pop()
        last = items.pop()
        item.heap_index = -1
        if i == len(items):
            return
        if last_key < old_key:
            self._up(i, last_key, last)
        else:
            self._down(i, last_key, last)

    def _up(self, pos: int, key: Key, item: Job) -> None:
        keys = self.keys
        items = self.items
        while pos:
            parent = (pos - 1) >> 1
            pkey = keys[parent]
            if key < pkey:
                keys[pos] = pkey
                moved = items[parent]
                items[pos] = moved
                moved.heap_index = pos
                pos = parent
            else:
                break
        keys[pos] = key
        items[pos] = item
        item.heap_index = pos

    def _down(self, pos: int, key: Key, item: Job) -> None:
        keys = self.keys
        items = self.items
        n = len(keys)
        child = 2 * pos + 1
        while child < n:
            ckey = keys[child]
            right = child + 1
            if right < n:
                rkey = keys[right]
                if rkey < ckey:
                    child = right
                    ckey = rkey
            if ckey < key:
                keys[pos] = ckey
                moved = items[child]
                items[pos] = moved
                moved.heap_index = pos
                pos = child
                child = 2 * pos + 1
            else:
                break
        keys[pos] = key
        items[pos] = item
        item.heap_index = pos
