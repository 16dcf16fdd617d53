"""The updates of a replay-based algorithm besides their losses: when learning may start,
the batches of a run of updates (drawn from the replay buffer onto the agent's device, many
updates' at once where the buffer can) and their diagnostics, read back together."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rl_arrays import buffer_to, normalize_device, torchify_buffer
from rl_replay import BaseNStepReturnBuffer

from ._replay_feed import observation_bytes

__all__ = [
    "batch_on_device",
    "check_learning_start",
    "opt_info_out",
    "replayed_batches",
    "updates_per_optimize",
]

# The most observation bytes (observations and next observations) drawn from a uniform
# replay buffer at once, for several updates (see replayed_batches).
_DRAW_BYTES = 32 * 2**20


def updates_per_optimize(replay_ratio: float, sampler_bs: int, batch_size: int) -> int:
    """Updates per sampler batch of ``sampler_bs`` steps, on batches of ``batch_size``: each
    step is replayed ``replay_ratio`` times on average (at least one update)."""
    return max(1, round(replay_ratio * sampler_bs / batch_size))


def check_learning_start(
    min_steps_learn: int, min_itr_learn: int, T: int, B: int, needed: int
) -> None:
    """Refuse a ``min_steps_learn`` that starts learning (at sampler iteration
    ``min_itr_learn``, of ``[T, B]`` batches) before the replay buffer holds the ``needed``
    steps per environment of a first batch."""
    have = (min_itr_learn + 1) * T
    if have < needed:
        raise ValueError(
            f"min_steps_learn={min_steps_learn} starts learning at iteration "
            f"{min_itr_learn}, when the replay buffer holds {have} steps per "
            f"environment, but it needs {needed} to sample a first batch: make "
            f"min_steps_learn at least {(math.ceil(needed / T) - 1) * T * B}"
        )


def replayed_batches(
    buffer: BaseNStepReturnBuffer,
    n_updates: int,
    batch_B: int,
    to_device: Callable[[Any], Any],
    updates_per_draw: Callable[[], int],
    prepare_draw: Callable[[Any, int], Any],
) -> Iterator[Any]:
    """The batches (``batch_B`` rows each) of the next ``n_updates`` updates, each through
    ``to_device``.

    A buffer that can (``sample_batches``: uniform single-transition replay) draws many
    updates' batches in one go, up to ``_DRAW_BYTES`` of observations and
    ``updates_per_draw()`` updates (asked before each draw): one index draw, gather and
    conversion to tensors instead of one per update, which is much of a small network's
    update time. Each batch is then a view of its rows of the draw (after
    ``prepare_draw(draw, batch_B)``). Other buffers draw one batch per update (a prioritized
    one must see the last update's priorities). Lazy: a draw happens when its first batch
    is asked for.
    """
    if getattr(buffer, "prioritized", False) or not hasattr(buffer, "sample_batches"):
        for _ in range(n_updates):
            yield to_device(buffer.sample_batch(batch_B))
        return
    most = max(1, _DRAW_BYTES // (2 * observation_bytes(buffer) * batch_B))  # s and s'
    left = n_updates
    while left > 0:
        n_batches = min(left, most, updates_per_draw())
        draw = to_device(buffer.sample_batches(batch_B, n_batches))
        draw = prepare_draw(draw, batch_B)
        for i in range(n_batches):
            yield draw[i * batch_B : (i + 1) * batch_B]
        left -= n_batches


def batch_on_device(batch: Any, buffer: BaseNStepReturnBuffer | None, device: torch.device) -> Any:
    """A replayed batch on ``device``: as it is when the buffer gathered it there
    (``replay_device``), else converted to tensors and copied."""
    replay_device = getattr(buffer, "device", None)
    if replay_device is not None and replay_device == normalize_device(device):
        return batch
    return buffer_to(torchify_buffer(batch), device)


def opt_info_out(opt_info: Any, compiled: bool) -> Any:
    """The diagnostics of an ``optimize_agent`` call (lists of 0-dim tensors) as returned:
    ``compiled``, 1-D tensors left on the device, which the runner reads once per log row;
    else floats, read together: one wait for the device per call, not one per value."""
    if compiled:
        return type(opt_info)(*(torch.stack(values) if values else [] for values in opt_info))
    return type(opt_info)(*(_floats(values) for values in opt_info))


def _floats(values: list[Any]) -> list[float]:
    if values and all(isinstance(value, torch.Tensor) for value in values):
        return torch.stack(values).tolist()
    return [float(value) for value in values]
