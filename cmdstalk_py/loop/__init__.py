"""One event loop for the server and the supervisor (``core``), the coroutines that run on
it (``futures``: futures and tasks) and what they wait with (``tools``).

Nothing is imported here: the server imports ``core`` alone, and its start-up is counted.
"""
