"""Log lines that a flood of requests cannot multiply: at most one line per kind each interval, and
the next line that goes out says how many were held back since the one before.

A refused call (api.auth.AuthFailures) and an unexpected error (api.errors.api_error) each
write a line, and a client can cause either as often as it likes: unthrottled, a loop of bad
requests fills the disk, and an incident's traceback per request buries the first one.
"""

from __future__ import annotations

from raftlog.raft.waiting import Clock, loop_time

LOG_INTERVAL_S = 1.0  # lines of one kind go out at most this often


class LogThrottle:
    """Which lines go out: `admit(kind)` is None for a line to hold back (it is counted), else how
    many lines of that kind were held back since the last one went out."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, clock: Clock = loop_time) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._logged: dict[str, float] = {}  # kind -> when its last line went out
        self._held_back: dict[str, int] = {}

    def admit(self, kind: str) -> int | None:
        now = self.clock()
        last = self._logged.get(kind)
        if last is not None and now - last < self.interval_s:
            self._held_back[kind] = self._held_back.get(kind, 0) + 1
            return None
        self._logged[kind] = now
        return self._held_back.pop(kind, 0)


def since_last(held_back: int, what: str = "") -> str:
    """The words a line adds for the lines of its kind held back before it (`what`: their name)."""
    return f" (and {held_back} more{' ' + what if what else ''} since the last line)" if held_back else ""
