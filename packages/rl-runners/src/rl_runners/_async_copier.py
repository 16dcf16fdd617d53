"""The asynchronous runner's memory copier: the written halves of the double buffer, in
sampling order, into the algorithm's replay buffer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from rl_arrays import enter_child

from ._async_control import COPIED, Control, begin, report
from ._protocols import SharedReplay

__all__ = ["memory_copier"]


def memory_copier(
    sample_buffers: Sequence[Any],
    samples_to_buffer: Callable[[Any], Any],
    replay_buffer: SharedReplay,
    ctrl: Control,
    n_itr: int,
    main_pid: int,
) -> None:
    """The memory copier's process: each written half of the double buffer, in order, into
    the replay buffer (whose ``append_samples`` holds its write lock), then freed."""
    enter_child(main_pid)
    try:
        import torch

        torch.set_num_threads(1)  # (samples_to_buffer may compute, e.g. input priorities)
        start = begin(ctrl)
        if start is None:
            return
        for itr in range(start, n_itr):
            db_idx = itr % 2
            if not ctrl.ready[db_idx].acquire(ctrl):
                return
            replay_buffer.append_samples(samples_to_buffer(sample_buffers[db_idx]))
            ctrl.state[COPIED] = itr + 1
            ctrl.copied[db_idx].release()
    except Exception as error:
        report(ctrl.copier_end, "memory copier", error)
        sys.exit(1)
