"""What every sampler shares: arguments, environment seeds, the sample buffer, and the
``initialize / obtain_samples / evaluate_agent / shutdown`` life cycle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from rl_arrays import BatchSpec, as_count

from ._agent import AsyncSamplerAgent, SamplerAgent
from ._collectors import BaseCollector
from ._env import Env
from ._samples_buffer import build_samples_buffer, get_example_outputs
from ._traj_info import TrajInfo, set_traj_info_kwargs

__all__ = ["BaseSampler"]


class BaseSampler:
    """Collects ``[batch_T, batch_B]`` batches of agent-environment interaction.

    ``EnvCls(**env_kwargs)`` makes each environment (it must pickle, with its kwargs, for
    parallel samplers started with spawn or forkserver).  Evaluation runs ``eval_n_envs``
    environments for at most ``eval_max_steps`` steps in all, stopping early once
    ``eval_max_trajectories`` episodes are complete.  The arguments after ``batch_B`` are
    keyword-only.
    """

    agent_in_workers = False  # whether worker processes run copies of the agent
    # Whether it samples in a process of its own, beside the optimiser's (``AsyncSampler``
    # sets it): the acting parameters then come from the training process's shared memory.
    asynchronous = False
    agent: SamplerAgent

    def __init__(
        self,
        EnvCls: Callable[..., Env],
        env_kwargs: dict[str, Any] | None,
        batch_T: int,
        batch_B: int,
        *,
        CollectorCls: type[BaseCollector] | None,
        max_decorrelation_steps: int = 100,
        TrajInfoCls: type[TrajInfo] = TrajInfo,
        eval_n_envs: int = 0,
        eval_CollectorCls: type | None = None,
        eval_env_kwargs: dict[str, Any] | None = None,
        eval_max_steps: int | None = None,
        eval_max_trajectories: int | None = None,
    ):
        if not callable(EnvCls):
            raise TypeError(f"EnvCls must make an environment when called, got {EnvCls!r}")
        self.batch_spec = BatchSpec(batch_T, batch_B)
        # Counts as rlpyt's scripts write them too: eval_max_steps=int(10e3) or 10e3.
        max_decorrelation_steps = as_count(
            "max_decorrelation_steps", max_decorrelation_steps, expected=">= 0"
        )
        eval_n_envs = as_count("eval_n_envs", eval_n_envs, expected=">= 0")
        self.eval_max_T = 0  # steps per evaluation env
        if eval_n_envs > 0:
            try:
                eval_max_steps = as_count("eval_max_steps", eval_max_steps, eval_n_envs)
            except ValueError:
                raise ValueError(
                    f"evaluation needs eval_max_steps >= eval_n_envs={eval_n_envs}, "
                    f"got {eval_max_steps}"
                ) from None
            self.eval_max_T = eval_max_steps // eval_n_envs
        if eval_max_trajectories is not None:
            eval_max_trajectories = as_count(
                "eval_max_trajectories", eval_max_trajectories, 1, expected=">= 1"
            )
        self.EnvCls, self.env_kwargs = EnvCls, dict(env_kwargs or {})
        self.CollectorCls, self.eval_CollectorCls = CollectorCls, eval_CollectorCls
        self.max_decorrelation_steps = max_decorrelation_steps
        self.TrajInfoCls = TrajInfoCls
        self.eval_n_envs = eval_n_envs
        self.eval_env_kwargs = dict(self.env_kwargs if eval_env_kwargs is None else eval_env_kwargs)
        self.eval_max_trajectories = eval_max_trajectories
        self.global_B = batch_B  # environments across every rank (initialize's world_size)

    @property
    def batch_size(self) -> int:
        return self.batch_spec.size

    def _seeds(self, seed: int | None, rank: int) -> np.random.SeedSequence:
        """Where every environment's seed comes from: the run's seed and this rank."""
        return np.random.SeedSequence(seed).spawn(rank + 1)[rank]

    def _env_seeds(self, seed: int | None, rank: int, n: int, offset: int = 0) -> list[int]:
        """Seeds for environments ``offset .. offset + n`` of this rank: the same env index
        gets the same seed whichever sampler (and how many workers) steps it."""
        children = self._seeds(seed, rank).spawn(offset + n)[offset:]
        return [int(c.generate_state(1)[0]) for c in children]

    def make_examples(
        self, agent: SamplerAgent, traj_info_kwargs: dict[str, Any] | None
    ) -> dict[str, Any]:
        """One example of every field, from one real step of a fresh environment."""
        self.traj_info_kwargs = dict(traj_info_kwargs or {})  # (for the workers, too)
        set_traj_info_kwargs(self.TrajInfoCls, self.traj_info_kwargs)
        env = self.EnvCls(**self.env_kwargs)
        try:
            return get_example_outputs(agent, env)
        finally:
            env.close()

    def _examples_and_buffer(
        self,
        agent: SamplerAgent,
        bootstrap_value: bool,
        traj_info_kwargs: dict[str, Any] | None,
        shared: bool,
    ) -> dict[str, Any]:
        """Examples, and the batch as ``samples_pyt`` / ``samples_np``; ``buffers`` lists
        every batch buffer the collectors may be told to fill (the async samplers have two)."""
        examples = self.make_examples(agent, traj_info_kwargs)
        self.samples_pyt, self.samples_np = build_samples_buffer(
            examples, self.batch_spec, bootstrap_value, shared
        )
        self.buffers = [self.samples_np]
        return examples

    def initialize(
        self,
        agent: SamplerAgent,
        affinity: dict[str, Any] | None = None,
        seed: int | None = None,
        bootstrap_value: bool = False,
        traj_info_kwargs: dict[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> dict[str, Any]:
        """Make the environments, initialize the agent, allocate the batch; return one
        example of every field (to size replay buffers)."""
        raise NotImplementedError

    def launch(
        self, affinity: dict[str, Any] | None, seed: int | None, rank: int, examples: dict[str, Any]
    ) -> None:
        """Make the environments (or start the workers) of a sampler whose agent and buffers
        are set: the second stage of an asynchronous sampler, in its own process."""
        raise NotImplementedError

    def refresh_agent(self) -> None:
        """Before each batch or evaluation: bring the parameters that act up to date (from
        the training process's, when sampling runs asynchronously)."""
        if self.asynchronous:
            cast(AsyncSamplerAgent, self.agent).recv_shared_memory()

    def obtain_samples(self, itr: int) -> tuple[Any, Sequence[TrajInfo]]:
        """One batch: ``(samples as torch tensors [T, B], completed trajectory infos)``."""
        return self.samples_pyt, self.collect(itr, 0)

    def collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        """Fill ``self.buffers[db_idx]``; return the trajectory infos completed."""
        raise NotImplementedError

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Close environments and end any worker process."""

    def __enter__(self) -> BaseSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
