"""The serial sampler: everything in the calling process (simple, and easy to debug)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._agent import SamplerAgent
from ._base import BaseSampler
from ._collectors import BaseCollector, CpuResetCollector, SerialEvalCollector
from ._env_state import load_state, state_of
from ._traj_info import TrajInfo

__all__ = ["SerialSampler"]


class SerialSampler(BaseSampler):
    """Steps ``batch_B`` environments in this process with a CPU-style collector."""

    CollectorCls: type[BaseCollector]
    eval_CollectorCls: type[SerialEvalCollector]

    def __init__(
        self,
        *args: Any,
        CollectorCls: type[BaseCollector] = CpuResetCollector,
        eval_CollectorCls: type[SerialEvalCollector] = SerialEvalCollector,
        **kwargs: Any,
    ):
        super().__init__(
            *args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls, **kwargs
        )

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
        B = self.batch_spec.B
        self._make_envs(seed, rank)
        agent.initialize(
            self.envs[0].spaces,
            share_memory=False,
            global_B=B * world_size,
            env_ranks=list(range(rank * B, (rank + 1) * B)),
        )
        examples = self._examples_and_buffer(agent, bootstrap_value, traj_info_kwargs, shared=False)
        self.agent = agent
        self._start_collectors(seed, rank)
        return examples

    def launch(
        self, affinity: dict[str, Any] | None, seed: int | None, rank: int, examples: dict[str, Any]
    ) -> None:
        """Make the environments and start collecting (the agent and buffers are set)."""
        self._make_envs(seed, rank)
        self._start_collectors(seed, rank)

    def _make_envs(self, seed: int | None, rank: int) -> None:
        B = self.batch_spec.B
        self.envs = [self.EnvCls(**self.env_kwargs) for _ in range(B)]
        for env, env_seed in zip(self.envs, self._env_seeds(seed, rank, B), strict=True):
            env.seed(env_seed)

    def _start_collectors(self, seed: int | None, rank: int) -> None:
        """The collector (started: decorrelated envs) and the evaluation collector."""
        B = self.batch_spec.B
        self.collector = self.CollectorCls(
            rank=0,
            envs=self.envs,
            samples_np=self.samples_np,
            batch_T=self.batch_spec.T,
            TrajInfoCls=self.TrajInfoCls,
            agent=self.agent,
            env_seeds=self._env_seeds(seed, rank, B),
        )
        self.agent_inputs, self.traj_infos = self.collector.start_envs(self.max_decorrelation_steps)
        self.collector.start_agent()
        if self.eval_n_envs > 0:
            self.eval_envs = [self.EnvCls(**self.eval_env_kwargs) for _ in range(self.eval_n_envs)]
            eval_seeds = self._env_seeds(seed, rank, self.eval_n_envs, offset=B)
            for env, env_seed in zip(self.eval_envs, eval_seeds, strict=True):
                env.seed(env_seed)
            self.eval_collector = self.eval_CollectorCls(
                self.eval_envs,
                self.agent,
                self.TrajInfoCls,
                self.eval_max_T,
                self.eval_max_trajectories,
            )

    def collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        """Fill ``self.buffers[db_idx]``; return the trajectory infos completed."""
        self.refresh_agent()
        self.collector.samples_np = self.buffers[db_idx]
        self.collector.reset_if_needed(self.agent_inputs)
        self.agent_inputs, self.traj_infos, completed = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr
        )
        return completed

    def state_dict(self) -> dict[str, Any]:
        """Where every environment is, to resume a run exactly, as plain data (arrays,
        numbers, strings: see ``state_of``): the environments, the collector's random
        generators, the agent inputs and the episodes under way; a recurrent agent's state
        is not in it. ``UnsavedState`` when an environment's state cannot be written so."""
        return state_of(self._resumed_parts(), "sampler")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()`` of a sampler made with the same arguments."""
        parts = self._resumed_parts()
        saved = {key: len(state["items"][key]["items"]) for key in ("envs", "eval_envs")}
        if saved != {"envs": len(self.envs), "eval_envs": self.eval_n_envs}:
            raise ValueError(
                f"the saved state has {saved['envs']} environments and {saved['eval_envs']} "
                f"evaluation ones; this sampler has {len(self.envs)} and {self.eval_n_envs}"
            )
        if parts["need_reset"] is None and isinstance(state["items"]["need_reset"], np.ndarray):
            raise ValueError(
                "the saved state is of a wait-reset collector; this sampler's "
                f"{type(self.collector).__name__} resets environments mid-batch"
            )
        loaded = load_state(parts, state, "sampler")
        self.agent_inputs, self.traj_infos = loaded["agent_inputs"], loaded["traj_infos"]

    def _resumed_parts(self) -> dict[str, Any]:
        return dict(
            envs=self.envs,
            eval_envs=getattr(self, "eval_envs", []),
            rngs=self.collector.rngs,
            need_reset=self.collector.need_reset,
            agent_inputs=self.agent_inputs,
            traj_infos=self.traj_infos,
        )

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        if self.eval_n_envs == 0:
            raise RuntimeError("this sampler was made with eval_n_envs=0")
        self.refresh_agent()
        return self.eval_collector.collect_evaluation(itr)

    def shutdown(self) -> None:
        for env in getattr(self, "envs", []) + getattr(self, "eval_envs", []):
            env.close()
