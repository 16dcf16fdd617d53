"""Collectors: the loop that steps a group of environments with an agent and writes each
step into the ``[T, B]`` sample buffer.  They run wherever the environments live (the main
process for the serial sampler, each worker for the parallel ones).

Episode boundaries: when an environment is done it is reset (at once with the reset
collector, at the end of the batch with the wait-reset one), the agent's state for it is
reset (``reset_one``), and its next previous action and reward are the null action and 0,
exactly what replay buffers hand back for an episode's first step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_arrays import AgentInputs, numpify_buffer, torchify_buffer

from ._env import Env
from ._traj_info import TrajInfo

__all__ = [
    "BaseCollector",
    "CpuResetCollector",
    "CpuWaitResetCollector",
    "DecorrelatingStartCollector",
    "SerialEvalCollector",
]


class BaseCollector:
    """Steps ``envs`` for ``batch_T`` steps into ``samples_np`` (their ``[T, len(envs)]``
    slice of the batch).  ``env_seeds`` make the start (decorrelation) reproducible."""

    def __init__(
        self,
        rank: int,
        envs: list[Env],
        samples_np: Any,
        batch_T: int,
        TrajInfoCls: type[TrajInfo],
        agent: Any = None,
        env_seeds: list[int] | None = None,
    ):
        self.rank, self.envs, self.samples_np = rank, envs, samples_np
        self.batch_T, self.TrajInfoCls, self.agent = batch_T, TrajInfoCls, agent
        seeds = env_seeds if env_seeds is not None else [None] * len(envs)
        self.rngs = [np.random.default_rng(s) for s in seeds]
        self.null_action = envs[0].action_space.null_value()

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[Any, list[TrajInfo]]:
        """Reset every env; return the first agent inputs and fresh trajectory infos."""
        observations = np.stack([env.reset() for env in self.envs])
        prev_action = np.stack([self.null_action] * len(self.envs))
        prev_reward = np.zeros(len(self.envs), np.float32)
        return AgentInputs(observations, prev_action, prev_reward), [
            self.TrajInfoCls() for _ in self.envs
        ]

    def start_agent(self) -> None:
        if self.agent is not None:
            self.agent.reset()

    def reset_if_needed(self, agent_inputs: Any) -> None:
        """Reset environments that finished in the last batch (wait-reset collectors)."""

    def collect_batch(
        self, agent_inputs: Any, traj_infos: list[TrajInfo], itr: int
    ) -> tuple[Any, list[TrajInfo], list[TrajInfo]]:
        raise NotImplementedError


class DecorrelatingStartCollector(BaseCollector):
    """Starts each environment a random number of random-action steps into an episode, so
    the environments of one batch are not in lockstep."""

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[Any, list[TrajInfo]]:
        agent_inputs, traj_infos = super().start_envs()
        observation, prev_action, prev_reward = agent_inputs
        if max_decorrelation_steps <= 0:
            return agent_inputs, traj_infos
        for b, env in enumerate(self.envs):
            for _ in range(int(self.rngs[b].integers(max_decorrelation_steps + 1))):
                action = env.action_space.sample()
                o, r, d, env_info = env.step(action)
                traj_infos[b].step(observation[b], action, r, d, None, env_info)
                if getattr(env_info, "traj_done", d):
                    traj_infos[b] = self.TrajInfoCls()
                if d:
                    o, action, r = env.reset(), self.null_action, 0.0
                observation[b], prev_action[b], prev_reward[b] = o, action, r
        return agent_inputs, traj_infos


class CpuResetCollector(DecorrelatingStartCollector):
    """The agent acts for all of its envs in one call each step; a done env resets at once
    (``mid_batch_reset``)."""

    mid_batch_reset = True

    def collect_batch(
        self, agent_inputs: Any, traj_infos: list[TrajInfo], itr: int
    ) -> tuple[Any, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        observation, prev_action, prev_reward = agent_inputs
        prev_pyt = torchify_buffer((prev_action, prev_reward))
        waiting = self._waiting(len(self.envs))
        completed = []
        self.agent.sample_mode(itr)
        # Each step's new observations go straight into the next row of the batch (the last
        # step's into ``observation``, which carries over to the next batch): one copy each.
        env_buf.observation[0] = observation
        for t in range(self.batch_T):
            current = env_buf.observation[t]
            following = env_buf.observation[t + 1] if t + 1 < self.batch_T else observation
            agent_buf.prev_action[t] = prev_action
            env_buf.prev_reward[t] = prev_reward
            with torch.no_grad():
                action_pyt, agent_info_pyt = self.agent.step(torchify_buffer(current), *prev_pyt)
            action, agent_info = numpify_buffer(action_pyt), numpify_buffer(agent_info_pyt)
            agent_buf.action[t] = action
            if agent_info is not None:
                agent_buf.agent_info[t] = agent_info
            for b, env in enumerate(self.envs):
                if waiting[b]:  # done earlier in this batch: record a blank, keep done
                    env_buf.reward[t, b], env_buf.done[t, b] = 0, True
                    if env_buf.env_info is not None:
                        env_buf.env_info[t, b] = 0  # (no stale timeout from an earlier batch)
                    following[b] = current[b]
                    continue
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(
                    current[b],
                    action[b],
                    r,
                    d,
                    None if agent_info is None else agent_info[b],
                    env_info,
                )
                if getattr(env_info, "traj_done", d):
                    completed.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls()
                env_buf.reward[t, b], env_buf.done[t, b] = r, d
                if env_info is not None:
                    env_buf.env_info[t, b] = env_info
                if not d:
                    prev_action[b] = action[b]
                elif self.mid_batch_reset:
                    o, prev_action[b], r = env.reset(), self.null_action, 0.0
                    self.agent.reset_one(idx=b)
                else:  # blank steps follow, fed the null action and reward too
                    waiting[b], prev_action[b], r = True, self.null_action, 0.0
                following[b], prev_reward[b] = o, r
        if "bootstrap_value" in agent_buf:
            with torch.no_grad():  # value() must not advance a recurrent agent's state
                value = self.agent.value(*torchify_buffer(agent_inputs))
            agent_buf.bootstrap_value[:] = numpify_buffer(value)
        return agent_inputs, traj_infos, completed

    def _waiting(self, n: int) -> np.ndarray:
        return np.zeros(n, bool)


class CpuWaitResetCollector(CpuResetCollector):
    """A done env waits, recording blank steps with done=True, until the batch ends; then it
    resets.  For recurrent agents trained without ``mid_batch_reset``: every sequence in a
    batch then starts with a fresh or continuing rnn state, never one reset mid-way."""

    mid_batch_reset = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.need_reset = np.zeros(len(self.envs), bool)

    def _waiting(self, n: int) -> np.ndarray:
        return self.need_reset

    def reset_if_needed(self, agent_inputs: Any) -> None:
        observation, prev_action, prev_reward = agent_inputs
        for b in np.flatnonzero(self.need_reset):
            observation[b], prev_action[b], prev_reward[b] = (
                self.envs[b].reset(),
                self.null_action,
                0,
            )
            self.agent.reset_one(idx=b)
        self.need_reset[:] = False


class SerialEvalCollector:
    """Runs the agent in evaluation mode on ``envs`` for at most ``max_T`` steps each, or
    until ``max_trajectories`` episodes are complete; returns their trajectory infos."""

    def __init__(
        self,
        envs: list[Env],
        agent: Any,
        TrajInfoCls: type[TrajInfo],
        max_T: int,
        max_trajectories: int | None = None,
    ):
        self.envs, self.agent, self.TrajInfoCls = envs, agent, TrajInfoCls
        self.max_T, self.max_trajectories = max_T, max_trajectories
        self.null_action = envs[0].action_space.null_value()

    def collect_evaluation(self, itr: int, stop: Any = None, report: Any = None) -> list[TrajInfo]:
        """``stop``: a flag (``.value``) raised elsewhere once enough episodes are in;
        ``report``: called with each episode's info as it completes (parallel samplers)."""
        observation = np.stack([env.reset() for env in self.envs])
        prev_action = np.stack([self.null_action] * len(self.envs))
        prev_reward = np.zeros(len(self.envs), np.float32)
        inputs_pyt = torchify_buffer(AgentInputs(observation, prev_action, prev_reward))
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        completed: list[TrajInfo] = []
        self.agent.eval_mode(itr)  # (first: the reset is then of the evaluation state)
        self.agent.reset()
        for _ in range(self.max_T):
            with torch.no_grad():
                action_pyt, agent_info_pyt = self.agent.step(*inputs_pyt)
            action, agent_info = numpify_buffer(action_pyt), numpify_buffer(agent_info_pyt)
            for b, env in enumerate(self.envs):
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(
                    observation[b],
                    action[b],
                    r,
                    d,
                    None if agent_info is None else agent_info[b],
                    env_info,
                )
                if getattr(env_info, "traj_done", d):
                    completed.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls()
                    if report is not None:
                        report(completed[-1])
                if d:
                    o, prev_action[b], r = env.reset(), self.null_action, 0.0
                    self.agent.reset_one(idx=b)
                else:
                    prev_action[b] = action[b]
                observation[b], prev_reward[b] = o, r
            if self.max_trajectories is not None and len(completed) >= self.max_trajectories:
                break
            if stop is not None and stop.value:
                break
        return completed[: self.max_trajectories]
