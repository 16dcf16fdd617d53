"""The console: the progress bar towards the next log line (tqdm, on stderr when it is a
terminal), and printing lines around it."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from tqdm import tqdm

from rl_arrays import as_count

__all__ = ["ProgBarCounter", "print_line"]


class _Bar(tqdm):
    """tqdm without its monitor thread (a thread would make ``AsyncRl`` start its children
    with spawn) and with a thread lock (tqdm's default lock is a multiprocessing one)."""

    monitor_interval = 0
    _lock = threading.RLock()


_live: set[_Bar] = set()  # bars on the screen, cleared while a line is printed


def print_line(line: str) -> None:
    """Print ``line`` on stdout; a bar on the screen is cleared first and drawn again below."""
    if not _live:
        print(line, flush=True)
        return
    with _Bar.external_write_mode():
        print(line, flush=True)


class ProgBarCounter:
    """rlpyt's ``ProgBarCounter(total_count)``: ``update(count)`` with the count done so far,
    ``stop()`` at the end. A tqdm bar with the time left, drawn from the first update when
    ``stream`` (default stderr) is a terminal, nothing otherwise; ``stop`` clears it."""

    def __init__(self, total_count: int, stream: TextIO | None = None):
        self.total_count = as_count("total_count", total_count, 1, expected=">= 1")
        self.stream = sys.stderr if stream is None else stream
        self._bar: _Bar | None = None
        self._stopped = False

    def update(self, current_count: int) -> None:
        """Record that ``current_count`` of ``total_count`` are done."""
        if self._stopped:
            return
        if self._bar is None:  # (ranks other than 0 never update: they draw nothing)
            self._bar = _Bar(
                total=self.total_count,
                file=self.stream,
                disable=None,  # (drawn on a terminal only)
                leave=False,
                unit="itr",
                dynamic_ncols=True,
                miniters=1,  # (redrawn at most every 0.1 s, however slow the iterations)
            )
            if not self._bar.disable:
                _live.add(self._bar)
        count = min(max(int(current_count), 0), self.total_count)
        self._bar.update(count - self._bar.n)

    def stop(self) -> None:
        """End the bar (it is cleared from the screen); later updates are ignored."""
        if self._stopped:
            return
        self._stopped = True
        if self._bar is not None:
            _live.discard(self._bar)
            self._bar.close()
