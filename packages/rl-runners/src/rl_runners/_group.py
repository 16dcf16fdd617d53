"""The processes a runner trains in: one (``SingleProcess``) or a torch.distributed group
(``ProcessGroup``, what ``SyncRl`` gives its loop)."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any, Protocol

import torch
import torch.distributed as dist

from ._logger import logger
from ._seed import make_seed

__all__ = ["Group", "ProcessGroup", "SingleProcess"]

Records = list[dict[str, Any]]


class Group(Protocol):
    rank: int
    world_size: int

    def startup(self, agent: Any) -> None: ...

    def gather(self, count: int, records: Records) -> tuple[int, Records] | None: ...

    def agree(self, stop: bool) -> bool: ...


class SingleProcess:
    """One process: rank 0 of 1; nothing to gather or agree on."""

    rank, world_size = 0, 1

    def startup(self, agent: Any) -> None:
        pass

    def gather(self, count: int, records: Records) -> tuple[int, Records] | None:
        return count, records

    def agree(self, stop: bool) -> bool:
        return stop


class ProcessGroup:
    """Rank ``rank`` of ``world_size`` processes: the agent's model in
    DistributedDataParallel, rank 0 gathering the trajectories and deciding to stop."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.objects: Any = None  # the gloo group that Python objects travel through

    def join(self, init_method: str, affinity: Mapping[str, Any], seed: int | None) -> int:
        """Join the process group; returns the seed all ranks agree on (rank 0's)."""
        cuda_idx = affinity.get("cuda_idx")
        if cuda_idx is not None:
            torch.cuda.set_device(cuda_idx)
        backend = "gloo" if cuda_idx is None else "nccl"
        dist.init_process_group(
            backend, init_method=init_method, rank=self.rank, world_size=self.world_size
        )
        self.objects = None if backend == "gloo" else dist.new_group(backend="gloo")
        seeds = [seed if seed is not None else make_seed()]
        dist.broadcast_object_list(seeds, src=0, group=self.objects)
        logger.log(f"Joined {backend} process group: rank {self.rank} of {self.world_size}.")
        return seeds[0]

    def startup(self, agent: Any) -> None:
        agent.data_parallel()

    def gather(self, count: int, records: Records) -> tuple[int, Records] | None:
        """Every rank's count and records, on rank 0 (None elsewhere)."""
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object((count, records), gathered, dst=0, group=self.objects)
        if gathered is None:
            return None
        return sum(n for n, _ in gathered), [
            r for _, rank_records in gathered for r in rank_records
        ]

    def agree(self, stop: bool) -> bool:
        decision = [stop]
        dist.broadcast_object_list(decision, src=0, group=self.objects)
        return bool(decision[0])

    def barrier(self) -> None:
        dist.barrier(group=self.objects)

    def leave(self, agent: Any) -> None:
        """Destroy the process group, after the agent let go of it (``leave_data_parallel``,
        where the agent has it): a group still held by DistributedDataParallel ends in the
        interpreter's exit, where gloo's teardown sometimes aborts the process."""
        leave = getattr(agent, "leave_data_parallel", None)
        if leave is not None:
            leave()
            gc.collect()  # (the wrapper's reference cycles hold the group too)
        dist.destroy_process_group()
