"""Small value helpers shared by the runners and the logger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rl_arrays import as_count

__all__ = ["plain", "positive_int", "traj_record"]


def plain(value: Any) -> Any:
    """A python scalar for numpy scalars and one-element tensors; anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def positive_int(name: str, value: Any) -> int:
    """A positive int from an int (numpy's too) or an integral float such as ``1e5``."""
    return as_count(name, value, 1, expected="a positive integer")


def traj_record(info: Any) -> dict[str, bool | int | float]:
    """The public numeric fields of a trajectory info as python numbers (what is logged, and
    what a checkpoint keeps of the trajectory window)."""
    if isinstance(info, Mapping):
        items = info.items()
    elif hasattr(info, "_asdict"):
        items = info._asdict().items()
    else:
        items = vars(info).items()
    record = {}
    for key, value in items:
        value = plain(value)
        if not str(key).startswith("_") and isinstance(value, (bool, int, float)):
            record[str(key)] = value
    return record
