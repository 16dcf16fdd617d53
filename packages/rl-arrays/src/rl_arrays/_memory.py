"""Refusing a buffer that cannot fit, before it is allocated.

numpy (and shared memory) reserve pages lazily, so a replay buffer far larger than the machine
may allocate and then fail hours later, or fail at once with a bare allocation error that names
no setting. Buffers check their full size against the memory available first.
"""

from __future__ import annotations

__all__ = ["available_memory", "check_memory"]


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def available_memory() -> int | None:
    """Bytes the OS can still give without swapping (Linux's ``MemAvailable``); None where
    unknown (other systems), in which case nothing is checked."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(setting: str, value: int, bytes_per_unit: int, hint: str = "") -> None:
    """Raise MemoryError unless ``value`` units of ``bytes_per_unit`` bytes (a buffer sized by
    the user's ``setting``) fit in the available memory; the message names the setting, the
    size needed and the largest value that would fit, then ``hint``."""
    available = available_memory()
    needed = value * bytes_per_unit
    if available is None or needed <= available:
        return
    fits = available // max(bytes_per_unit, 1)
    raise MemoryError(
        f"{setting}={value} needs {_size(needed)} ({bytes_per_unit:,} bytes each), but "
        f"{_size(available)} of memory is available: {setting} <= {fits} would fit"
        + (f"; {hint}" if hint else "")
    )
