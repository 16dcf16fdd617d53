"""Asynchronous sampling, for the asynchronous runner: ``AsyncSampler`` runs a serial or
parallel sampler in a process of its own, where each batch fills one half of a double buffer
on shared memory, so that the other half can be copied into a replay buffer meanwhile.

Initialization has two stages, in two processes: ``async_initialize`` in the training
process (the agent on shared memory, the double buffer), then ``initialize(affinity)`` in the
sampler's process (the agent's own model, then the sampler's ``launch``: the envs, any
workers).  ``obtain_samples(itr, db_idx)`` copies the trained parameters in first.  rlpyt's
asynchronous samplers are presets of it, at the end of this module.  The README has the
details.
"""

from __future__ import annotations

import os
from typing import Any

from rl_arrays import BatchSpec

from ._agent import AsyncSamplerAgent
from ._base import BaseSampler
from ._collectors import CpuResetCollector, CpuWaitResetCollector
from ._gpu import GpuResetCollector, GpuWaitResetCollector
from ._parallel import AlternatingSampler, CpuSampler, GpuSampler, NoOverlapAlternatingSampler
from ._samples_buffer import build_samples_buffer
from ._serial import SerialSampler
from ._traj_info import TrajInfo, set_traj_info_kwargs

__all__ = [
    "AsyncAlternatingSampler",
    "AsyncCpuSampler",
    "AsyncGpuSampler",
    "AsyncNoOverlapAlternatingSampler",
    "AsyncSampler",
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


class AsyncSampler:
    """``sampler`` (serial or parallel, not yet initialized), run asynchronously: its
    ``initialize`` and ``obtain_samples`` become the two-stage, double-buffered ones above."""

    def __init__(self, sampler: BaseSampler):
        self.sampler = sampler
        sampler.asynchronous = True

    @property
    def batch_spec(self) -> BatchSpec:
        return self.sampler.batch_spec

    @property
    def agent(self) -> AsyncSamplerAgent:
        return self.sampler.agent  # type: ignore[return-value]  # (async_initialize's)

    def async_initialize(
        self,
        agent: AsyncSamplerAgent,
        bootstrap_value: bool = False,
        traj_info_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> tuple[tuple[Any, Any], dict[str, Any]]:
        """Initialize ``agent`` on shared memory and allocate the double buffer; return
        ``(double_buffer, examples)``: two ``Samples`` of numpy arrays on shared memory."""
        sampler = self.sampler
        B = sampler.batch_spec.B
        env = sampler.EnvCls(**sampler.env_kwargs)
        try:
            agent.initialize(env.spaces, share_memory=True, global_B=B, env_ranks=list(range(B)))
        finally:
            env.close()
        self.examples = sampler.make_examples(agent, traj_info_kwargs)
        sampler.buffers = [
            build_samples_buffer(self.examples, sampler.batch_spec, bootstrap_value, True)[1]
            for _ in range(2)
        ]
        sampler.samples_np = sampler.buffers[0]
        sampler.agent, sampler.global_B = agent, B
        self.seed = seed
        return (sampler.buffers[0], sampler.buffers[1]), self.examples

    def initialize(self, affinity: dict[str, Any] | None = None) -> None:
        """In the sampler's process: pin it, give the agent its own model, then make the
        environments (and start the workers)."""
        sampler = self.sampler
        if not hasattr(self, "examples"):
            raise RuntimeError(
                f"{type(self).__name__}.initialize(affinity) runs in the sampler's process "
                "after async_initialize(agent, ...) in the training process"
            )
        affinity = affinity or {}
        set_traj_info_kwargs(sampler.TrajInfoCls, sampler.traj_info_kwargs)  # (this process's)
        if affinity.get("master_cpus") and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, affinity["master_cpus"])
        if affinity.get("master_torch_threads"):
            import torch

            torch.set_num_threads(affinity["master_torch_threads"])
        if affinity.get("cuda_idx") is not None:
            self.agent.to_device(affinity["cuda_idx"])
        self.agent.async_cpu(share_memory=sampler.agent_in_workers)
        sampler.launch(affinity, self.seed, 0, self.examples)

    def obtain_samples(self, itr: int, db_idx: int = 0) -> list[TrajInfo]:
        """Fill ``double_buffer[db_idx]``; return the trajectory infos completed."""
        if db_idx not in (0, 1):
            raise ValueError(f"db_idx must be 0 or 1 (a half of the double buffer), got {db_idx}")
        return self.sampler.collect(itr, db_idx)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        return self.sampler.evaluate_agent(itr)

    def shutdown(self) -> None:
        self.sampler.shutdown()

    def __enter__(self) -> AsyncSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# rlpyt's asynchronous samplers: presets of AsyncSampler, with their synchronous sampler's
# arguments.


class AsyncSerialSampler(AsyncSampler):
    """The serial sampler, in the sampler's process."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(SerialSampler(*args, **kwargs))


class AsyncCpuSampler(AsyncSampler):
    """CPU workers with their own agent copies, whose parameters the sampler's process
    refreshes from the training process before each batch."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(CpuSampler(*args, **kwargs))


class AsyncGpuSampler(AsyncSampler):
    """The action server in the sampler's process (on ``affinity["cuda_idx"]`` or the CPU)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(GpuSampler(*args, **kwargs))


class AsyncAlternatingSampler(AsyncSampler):
    """The alternating action server in the sampler's process."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(AlternatingSampler(*args, **kwargs))


class AsyncNoOverlapAlternatingSampler(AsyncSampler):
    """The alternating action server without overlap, in the sampler's process."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(NoOverlapAlternatingSampler(*args, **kwargs))
