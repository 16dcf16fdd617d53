"""Asynchronous samplers, for the asynchronous runner: each runs in a process of its own and
writes every batch into one half of a double buffer on shared memory, so that the other half
can be copied into a replay buffer meanwhile.

Initialization has two stages, in two processes: ``async_initialize`` in the training
process (the agent on shared memory, the double buffer), then ``initialize(affinity)`` in the
sampler's process (the agent's own model, the envs, any workers).  ``obtain_samples(itr,
db_idx)`` copies the trained parameters in first.  The README has the details.
"""

from __future__ import annotations

import os
from typing import Any

from ._agent import AsyncSamplerAgent
from ._base import BaseSampler
from ._collectors import CpuResetCollector, CpuWaitResetCollector
from ._gpu import (
    AlternatingSampler,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    NoOverlapAlternatingSampler,
)
from ._parallel import CpuSampler, ParallelSamplerBase
from ._samples_buffer import build_samples_buffer
from ._serial import SerialSampler
from ._traj_info import TrajInfo, set_traj_info_kwargs

__all__ = [
    "AsyncAlternatingSampler",
    "AsyncCpuSampler",
    "AsyncGpuSampler",
    "AsyncNoOverlapAlternatingSampler",
    "AsyncParallelSamplerMixin",
    "AsyncSamplerMixin",
    "AsyncSerialSampler",
    "DbCpuResetCollector",
    "DbCpuWaitResetCollector",
    "DbGpuResetCollector",
    "DbGpuWaitResetCollector",
]

# rlpyt's double-buffer collectors have their own classes; here the async samplers point every
# collector at the half of the double buffer it fills, so the plain collectors are them.
DbCpuResetCollector = CpuResetCollector
DbCpuWaitResetCollector = CpuWaitResetCollector
DbGpuResetCollector = GpuResetCollector
DbGpuWaitResetCollector = GpuWaitResetCollector


class AsyncSamplerMixin(BaseSampler):
    """The training-process half, and the double-buffered ``obtain_samples``.

    The async samplers follow another protocol than the synchronous ones they extend
    (``initialize(affinity)``, ``obtain_samples(itr, db_idx)`` returning only the
    trajectory infos): hence the ``override`` ignores in this module."""

    agent: AsyncSamplerAgent

    def async_initialize(
        self,
        agent: AsyncSamplerAgent,
        bootstrap_value: bool = False,
        traj_info_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> tuple[tuple[Any, Any], dict[str, Any]]:
        """Initialize ``agent`` on shared memory and allocate the double buffer; return
        ``(double_buffer, examples)``: two ``Samples`` of numpy arrays on shared memory."""
        B = self.batch_spec.B
        env = self.EnvCls(**self.env_kwargs)
        try:
            agent.initialize(env.spaces, share_memory=True, global_B=B, env_ranks=list(range(B)))
        finally:
            env.close()
        self.examples = self._examples(agent, traj_info_kwargs)
        self.buffers = [
            build_samples_buffer(self.examples, self.batch_spec, bootstrap_value, shared=True)[1]
            for _ in range(2)
        ]
        self.samples_np = self.buffers[0]
        self.agent, self.seed, self._global_B = agent, seed, B
        return (self.buffers[0], self.buffers[1]), self.examples

    def _take_agent(self, affinity: dict[str, Any] | None) -> dict[str, Any]:
        """In the sampler's process: pin it, and give the agent its own model."""
        if not hasattr(self, "agent"):
            raise RuntimeError(
                f"{type(self).__name__}.initialize(affinity) runs in the sampler's process "
                "after async_initialize(agent, ...) in the training process"
            )
        affinity = affinity or {}
        set_traj_info_kwargs(self.TrajInfoCls, self.traj_info_kwargs)  # (this process's class)
        if affinity.get("master_cpus") and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, affinity["master_cpus"])
        if affinity.get("master_torch_threads"):
            import torch

            torch.set_num_threads(affinity["master_torch_threads"])
        if affinity.get("cuda_idx") is not None:
            self.agent.to_device(affinity["cuda_idx"])
        self.agent.async_cpu(share_memory=self.agent_in_workers)
        return affinity

    def _refresh_agent(self) -> None:
        self.agent.recv_shared_memory()

    def obtain_samples(  # type: ignore[override]  # async protocol (see the class)
        self, itr: int, db_idx: int = 0
    ) -> list[TrajInfo]:
        """Fill ``double_buffer[db_idx]``; return the trajectory infos completed."""
        if db_idx not in (0, 1):
            raise ValueError(f"db_idx must be 0 or 1 (a half of the double buffer), got {db_idx}")
        return self._collect(itr, db_idx)


class AsyncParallelSamplerMixin(AsyncSamplerMixin, ParallelSamplerBase):
    """``initialize(affinity)`` for the samplers with worker processes: the workers are
    started from the sampler's process, and die with it."""

    def initialize(  # type: ignore[override]  # async protocol (see AsyncSamplerMixin)
        self, affinity: dict[str, Any] | None = None
    ) -> None:
        self._n_workers(affinity)
        affinity = self._take_agent(affinity)
        self._launch_workers(affinity, self.seed, 0, self.examples)


class AsyncSerialSampler(AsyncSamplerMixin, SerialSampler):
    """The serial sampler, in the sampler's process."""

    def initialize(  # type: ignore[override]  # async protocol (see AsyncSamplerMixin)
        self, affinity: dict[str, Any] | None = None
    ) -> None:
        self._take_agent(affinity)
        self._make_envs(self.seed, 0)
        self._start_collectors(self.seed, 0)


class AsyncCpuSampler(AsyncParallelSamplerMixin, CpuSampler):
    """CPU workers with their own agent copies, whose parameters the sampler's process
    refreshes from the training process before each batch."""


class AsyncGpuSampler(AsyncParallelSamplerMixin, GpuSampler):
    """The action server in the sampler's process (on ``affinity["cuda_idx"]`` or the CPU)."""


class AsyncAlternatingSampler(AsyncParallelSamplerMixin, AlternatingSampler):
    """The alternating action server in the sampler's process."""


class AsyncNoOverlapAlternatingSampler(AsyncParallelSamplerMixin, NoOverlapAlternatingSampler):
    """The alternating action server without overlap, in the sampler's process."""
