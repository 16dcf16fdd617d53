"""Seeding, and the random generators' states as plain values a checkpoint can hold."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import numpy as np
import torch

__all__ = ["get_rng_state", "make_seed", "seed_after", "set_rng_state", "set_seed"]


def set_seed(seed: int) -> None:
    """Seed python's ``random``, numpy's global generator and torch (CPU and every GPU)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def seed_after(seed: int, rank: int, next_itr: int) -> int:
    """A seed for rank ``rank`` of a run resumed after ``next_itr`` iterations, distinct for
    every rank and resume point (a snapshot holds rank 0's generators only)."""
    return int(np.random.SeedSequence([seed, rank, next_itr]).generate_state(1)[0])


def make_seed() -> int:
    """A seed in ``[0, 10000]`` that differs between processes started at the same moment:
    mixes the clock's nanoseconds with the process id."""
    return (time.perf_counter_ns() ^ (os.getpid() * 2654435761)) % 10001


def get_rng_state() -> dict[str, Any]:
    """The state of every global generator, as tensors, lists and numbers only, so that it
    loads with ``torch.load(weights_only=True)``."""
    version, internal, gauss = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [int(version), [int(x) for x in internal], gauss],
        "numpy": {
            "name": str(name),
            "key": [int(x) for x in key],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``get_rng_state`` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    npst = state["numpy"]
    np.random.set_state(
        (
            npst["name"],
            np.asarray(npst["key"], dtype=np.uint32),
            npst["pos"],
            npst["has_gauss"],
            npst["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
