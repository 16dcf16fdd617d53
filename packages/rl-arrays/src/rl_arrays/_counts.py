"""Counts as users write them: ``1000``, ``np.int64(1000)``, ``1e3`` or ``50e6``."""

from __future__ import annotations

from numbers import Integral

import numpy as np

__all__ = ["as_count"]


def as_count(name: str, value: object, low: int = 0, *, expected: str | None = None) -> int:
    """``value`` as a Python int >= ``low``: an int, a numpy integer or an integral float.

    rlpyt's scripts write counts as floats (``n_steps=50e6``, ``replay_size=1e6``); those are
    accepted and converted. A bool, a float with a fractional part, nan, inf, a string, None or
    a value below ``low`` raises ValueError "``{name} must be {expected}, got {value!r}``", where
    ``expected`` defaults to ``"an integer >= {low}"``.
    """
    count: int | None = None
    if isinstance(value, (float, np.floating)):
        if value.is_integer():  # neither fractional, nan nor inf
            count = int(value)
    elif isinstance(value, Integral) and not isinstance(value, bool):
        count = int(value)
    if count is None or count < low:
        what = f"an integer >= {low}" if expected is None else expected
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return count
