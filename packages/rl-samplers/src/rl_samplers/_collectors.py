"""Collectors: the loop that steps a group of environments with an agent and writes each
step into the ``[T, B]`` sample buffer.  They run wherever the environments live (the main
process for the serial sampler, each worker for the parallel ones).

Every collector steps its environments through ``step_envs`` and carries the previous
action and reward over with ``update_prev``; at an episode's start these are the null
action and 0, exactly what replay buffers hand back for an episode's first step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_arrays import AgentInputs, EnvStep, numpify_buffer, torchify_buffer

from ._agent import SamplerAgent
from ._env import Env
from ._spaces import sample_action, stack_values
from ._traj_info import TrajInfo

__all__ = [
    "BaseCollector",
    "CpuResetCollector",
    "CpuWaitResetCollector",
    "DecorrelatingStartCollector",
    "SerialEvalCollector",
    "reset_envs",
    "step_envs",
    "update_prev",
]


def reset_envs(
    envs: list[Env],
    TrajInfoCls: type[TrajInfo],
    null_action: Any,
    rngs: list[np.random.Generator] | None = None,
    max_decorrelation_steps: int = 0,
) -> tuple[Any, list[TrajInfo]]:
    """Reset every env; return the first ``AgentInputs`` and fresh trajectory infos.  With
    ``rngs``, env ``b`` then takes ``rngs[b].integers(max_decorrelation_steps + 1)`` random
    steps, so the envs of one batch are not in lockstep."""
    observation = stack_values([env.reset() for env in envs])
    prev_action = np.stack([null_action] * len(envs))
    prev_reward = np.zeros(len(envs), np.float32)
    traj_infos = [TrajInfoCls() for _ in envs]
    for b, env in enumerate(envs):
        n_steps = 0 if rngs is None else int(rngs[b].integers(max_decorrelation_steps + 1))
        for _ in range(n_steps):
            action = sample_action(env.action_space, observation[b])
            o, r, d, env_info = env.step(action)
            traj_infos[b].step(observation[b], action, r, d, None, env_info)
            if getattr(env_info, "traj_done", d):
                traj_infos[b] = TrajInfoCls()
            if d:
                o, action, r = env.reset(), null_action, 0.0
            observation[b], prev_action[b], prev_reward[b] = o, action, r
    return AgentInputs(observation, prev_action, prev_reward), traj_infos


def step_envs(
    envs: list[Env],
    observation: Any,
    action: Any,
    agent_info: Any,
    traj_infos: list[TrajInfo],
    TrajInfoCls: type[TrajInfo],
    out: EnvStep,
    waiting: np.ndarray | None = None,
) -> list[TrajInfo]:
    """Step env ``b`` with ``action[b]`` (chosen on ``observation[b]``), write the results
    into ``out`` (``[B]`` arrays, ``out.env_info`` may be None; ``out.observation`` may be
    ``observation``) and return the trajectory infos of the episodes that ended.  A done
    env resets at once; given ``waiting``, it is marked there instead and records blank
    steps (reward 0, done, zero env_info, same observation) until the caller resets it."""
    completed = []
    for b, env in enumerate(envs):
        if waiting is not None and waiting[b]:
            out.observation[b], out.reward[b], out.done[b] = observation[b], 0, True
            if out.env_info is not None:  # (no stale timeout from an earlier batch)
                out.env_info[b] = 0
            continue
        o, r, d, env_info = env.step(action[b])
        info = None if agent_info is None else agent_info[b]
        traj_infos[b].step(observation[b], action[b], r, d, info, env_info)
        if getattr(env_info, "traj_done", d):
            completed.append(traj_infos[b].terminate(o))
            traj_infos[b] = TrajInfoCls()
        if d:
            if waiting is None:
                o = env.reset()
            else:
                waiting[b] = True
        out.observation[b], out.reward[b], out.done[b] = o, r, d
        if out.env_info is not None and env_info is not None:
            out.env_info[b] = env_info
    return completed


def update_prev(
    prev_action: Any,
    prev_reward: np.ndarray,
    action: Any,
    reward: np.ndarray,
    done: np.ndarray,
    null_action: Any,
) -> None:
    """In place: the next step's previous action and reward are this step's, or the null
    action and 0 where ``done`` (the next step starts an episode, or is blank)."""
    prev_action[:], prev_reward[:] = action, reward
    prev_action[done], prev_reward[done] = null_action, 0


class BaseCollector:
    """Steps ``envs`` for ``batch_T`` steps into ``samples_np`` (their ``[T, len(envs)]``
    slice of the batch).  ``env_seeds`` make the start (decorrelation) reproducible."""

    mid_batch_reset = True  # False: a done env waits for the end of the batch to reset
    # Wait-reset: the envs done earlier in this batch (reset by ``reset_if_needed``).
    need_reset: np.ndarray | None = None

    def __init__(
        self,
        rank: int,
        envs: list[Env],
        samples_np: Any,
        batch_T: int,
        TrajInfoCls: type[TrajInfo],
        agent: SamplerAgent | None = None,
        env_seeds: list[int] | None = None,
    ):
        self.rank, self.envs, self.samples_np = rank, envs, samples_np
        self.batch_T, self.TrajInfoCls, self.agent = batch_T, TrajInfoCls, agent
        seeds = env_seeds if env_seeds is not None else [None] * len(envs)
        self.rngs = [np.random.default_rng(s) for s in seeds]
        self.null_action = envs[0].action_space.null_value()

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[Any, list[TrajInfo]]:
        """Reset every env; return the first agent inputs and fresh trajectory infos."""
        return reset_envs(self.envs, self.TrajInfoCls, self.null_action)

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
        return reset_envs(
            self.envs, self.TrajInfoCls, self.null_action, self.rngs, max_decorrelation_steps
        )


class CpuResetCollector(DecorrelatingStartCollector):
    """The agent acts for all of its envs in one call each step; a done env resets at once
    (``mid_batch_reset``) and the agent's state for it with ``reset_one``."""

    agent: SamplerAgent  # (required: it acts for the envs)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.need_reset = None if self.mid_batch_reset else np.zeros(len(self.envs), bool)

    def collect_batch(
        self, agent_inputs: Any, traj_infos: list[TrajInfo], itr: int
    ) -> tuple[Any, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        observation, prev_action, prev_reward = agent_inputs
        prev_pyt = torchify_buffer((prev_action, prev_reward))
        completed = []
        self.agent.sample_mode(itr)
        # Each step's new observations go straight into the next row of the batch (the last
        # step's into ``observation``, which carries over to the next batch): one copy each.
        env_buf.observation[0] = observation
        for t in range(self.batch_T):
            row = env_buf[t]
            following = env_buf.observation[t + 1] if t + 1 < self.batch_T else observation
            agent_buf.prev_action[t] = prev_action
            env_buf.prev_reward[t] = prev_reward
            with torch.no_grad():
                action_pyt, agent_info_pyt = self.agent.step(
                    torchify_buffer(row.observation), *prev_pyt
                )
            action, agent_info = numpify_buffer(action_pyt), numpify_buffer(agent_info_pyt)
            agent_buf.action[t] = action
            if agent_info is not None:
                agent_buf.agent_info[t] = agent_info
            out = EnvStep(following, row.reward, row.done, row.env_info)
            completed += step_envs(
                self.envs,
                row.observation,
                action,
                agent_info,
                traj_infos,
                self.TrajInfoCls,
                out,
                self.need_reset,
            )
            update_prev(prev_action, prev_reward, action, row.reward, row.done, self.null_action)
            if self.mid_batch_reset:
                for b in np.flatnonzero(row.done).tolist():
                    self.agent.reset_one(idx=b)
        if "bootstrap_value" in agent_buf:
            with torch.no_grad():  # value() must not advance a recurrent agent's state
                value = self.agent.value(*torchify_buffer(agent_inputs))
            agent_buf.bootstrap_value[:] = numpify_buffer(value)
        return agent_inputs, traj_infos, completed

    def reset_if_needed(self, agent_inputs: Any) -> None:
        if self.need_reset is None:
            return
        observation, prev_action, prev_reward = agent_inputs
        for b in np.flatnonzero(self.need_reset).tolist():
            observation[b] = self.envs[b].reset()
            prev_action[b], prev_reward[b] = self.null_action, 0
            self.agent.reset_one(idx=b)
        self.need_reset[:] = False


class CpuWaitResetCollector(CpuResetCollector):
    """A done env waits, recording blank steps with done=True, until the batch ends; then it
    resets.  For recurrent agents trained without ``mid_batch_reset``: every sequence in a
    batch then starts with a fresh or continuing rnn state, never one reset mid-way."""

    mid_batch_reset = False


class SerialEvalCollector:
    """Runs the agent in evaluation mode on ``envs`` for at most ``max_T`` steps each, or
    until ``max_trajectories`` episodes are complete; returns their trajectory infos."""

    def __init__(
        self,
        envs: list[Env],
        agent: SamplerAgent,
        TrajInfoCls: type[TrajInfo],
        max_T: int,
        max_trajectories: int | None = None,
    ):
        self.envs, self.agent, self.TrajInfoCls = envs, agent, TrajInfoCls
        self.max_T, self.max_trajectories = max_T, max_trajectories
        self.null_action = envs[0].action_space.null_value()

    def collect_evaluation(
        self, itr: int, stop: Any = None, report: Callable[[TrajInfo], object] | None = None
    ) -> list[TrajInfo]:
        """``stop``: a flag (``.value``) raised elsewhere once enough episodes are in;
        ``report``: called with each episode's info as it completes (parallel samplers)."""
        inputs, traj_infos = reset_envs(self.envs, self.TrajInfoCls, self.null_action)
        observation, prev_action, prev_reward = inputs
        out = EnvStep(observation, np.zeros_like(prev_reward), np.zeros(len(self.envs), bool), None)
        inputs_pyt = torchify_buffer(inputs)
        completed: list[TrajInfo] = []
        self.agent.eval_mode(itr)  # (first: the reset is then of the evaluation state)
        self.agent.reset()
        for _ in range(self.max_T):
            with torch.no_grad():
                action_pyt, agent_info_pyt = self.agent.step(*inputs_pyt)
            action, agent_info = numpify_buffer(action_pyt), numpify_buffer(agent_info_pyt)
            ended = step_envs(
                self.envs, observation, action, agent_info, traj_infos, self.TrajInfoCls, out
            )
            update_prev(prev_action, prev_reward, action, out.reward, out.done, self.null_action)
            for b in np.flatnonzero(out.done).tolist():
                self.agent.reset_one(idx=b)
            completed += ended
            if report is not None:
                for info in ended:
                    report(info)
            if self.max_trajectories is not None and len(completed) >= self.max_trajectories:
                break
            if stop is not None and stop.value:
                break
        return completed[: self.max_trajectories]
