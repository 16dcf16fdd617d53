"""A progress bar towards the next log line, on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rl_arrays import as_count

__all__ = ["ProgBarCounter"]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


class ProgBarCounter:
    """Shows ``update(count)`` against ``total_count`` with an estimate of the time left.

    On a terminal the bar redraws in place (at most ten times a second).  When stderr is not a
    terminal (a CI log, a file) it writes one plain line at most every ``text_interval_s``
    seconds, so a long interval leaves a trace without flooding the log, and a short one
    (under ``text_interval_s``) writes nothing.
    """

    width = 40
    text_interval_s = 30.0

    def __init__(self, total_count: int, stream: TextIO | None = None):
        self.total_count = as_count("total_count", total_count, 1, expected=">= 1")
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self._start = self._last_draw = time.monotonic()
        self._count = 0
        self._drawn = False
        self._stopped = False

    def update(self, current_count: int) -> None:
        """Record that ``current_count`` of ``total_count`` are done."""
        if self._stopped:
            return
        self._count = min(max(int(current_count), 0), self.total_count)
        now = time.monotonic()
        interval = 0.1 if self.tty else self.text_interval_s
        if now - self._last_draw >= interval:
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        done = self._count / self.total_count
        elapsed = now - self._start
        eta = elapsed * (1 - done) / done if done > 0 else float("nan")
        eta_text = _clock(eta) if eta == eta else "?"
        if self.tty:
            filled = int(self.width * done)
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(f"\r[{bar}] {done:4.0%}  ETA {eta_text}")
        else:
            self.stream.write(
                f"progress: {self._count}/{self.total_count} ({done:.0%}), ETA {eta_text}\n"
            )
        self.stream.flush()
        self._drawn = True

    def stop(self) -> None:
        """End the bar (clears the line on a terminal); later updates are ignored."""
        if self._stopped:
            return
        self._stopped = True
        if self.tty and self._drawn:
            self.stream.write("\r" + " " * (self.width + 20) + "\r")
            self.stream.flush()
