"""The runner's own process: its CPUs and torch threads, set at startup and put back at
shutdown."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import psutil
import torch

from ._logger import logger

__all__ = ["SMALL_MODEL_PARAMETERS", "default_torch_threads", "set_master_affinity"]


def set_master_affinity(affinity: Mapping[str, Any]) -> Callable[[], None]:
    """This process's CPUs (``master_cpus``) and torch threads (``master_torch_threads``);
    returns what puts back the ones it had (a runner does at shutdown, so that a process
    that trains, a notebook or a test, is not left pinned)."""
    process = psutil.Process()
    cpus = affinity.get("master_cpus")
    threads_before = torch.get_num_threads()
    try:
        cpus_before: list[int] | None = process.cpu_affinity()
    except AttributeError:  # macOS has no CPU affinity
        cpus_before = None
    try:
        if cpus is not None and affinity.get("set_affinity", True):
            process.cpu_affinity(list(cpus))
        cpu_affinity: list[int] | str = process.cpu_affinity()
    except AttributeError:  # macOS has no CPU affinity
        cpu_affinity = "unavailable"
    logger.debug(f"Runner master CPU affinity: {cpu_affinity}.")
    threads = affinity.get("master_torch_threads")
    if threads is not None:
        torch.set_num_threads(int(threads))
    logger.debug(f"Runner master Torch threads: {torch.get_num_threads()}.")

    def restore() -> None:
        if cpus_before is not None:
            process.cpu_affinity(cpus_before)
        torch.set_num_threads(threads_before)

    return restore


# Below this many parameters a model trains fastest on one torch thread: a second costs more
# in hand-over than it takes off the work (benchmarks/threads.py measures it).
SMALL_MODEL_PARAMETERS = 1_000_000


def default_torch_threads(agent: Any, sampler: object) -> int:
    """Torch threads for a process whose affinity names none: one for a small model or one
    on a GPU; else the CPUs this process may run on that the sampler's worker processes (one
    core each) leave, at least one. Torch's own default, every core, oversubscribes the
    machine as soon as workers run beside it."""
    device = getattr(agent, "device", None)
    if device is not None and torch.device(device).type != "cpu":
        return 1
    if sum(p.numel() for p in agent.parameters()) < SMALL_MODEL_PARAMETERS:
        return 1
    try:
        cpus = len(psutil.Process().cpu_affinity())
    except AttributeError:  # macOS has no CPU affinity
        cpus = os.cpu_count() or 1
    return max(1, cpus - len(getattr(sampler, "workers", ())))
