"""The worker side of the action server (``_action_server``): collectors that step their
environments with the actions the main process writes into a shared step buffer.

Per step, each worker waits for ``act_ready``, steps its environments with the actions in
the shared step buffer, writes the results back (resetting done environments), and
releases ``obs_ready``; the main process waits for every worker's ``obs_ready``, then
computes the next actions.  Both are one ``Gate`` per worker (a socket pair: a token each
way), which the main process waits on together with the worker's end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rl_arrays import AttrDict, EnvStep

from ._agent import SamplerAgent
from ._collectors import BaseCollector, reset_envs, step_envs
from ._env import Env
from ._traj_info import TrajInfo
from ._worker import Gate

__all__ = ["GpuEvalCollector", "GpuResetCollector", "GpuWaitResetCollector"]


class GpuResetCollector(BaseCollector):
    """Worker side: step the envs with the server's actions, reset done ones at once."""

    def __init__(
        self,
        *args: Any,
        step: AttrDict,
        act_ready: Gate,
        obs_ready: Gate,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.step, self.act_ready, self.obs_ready = step, act_ready, obs_ready

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[Any, list[TrajInfo]]:
        inputs, traj_infos = reset_envs(
            self.envs, self.TrajInfoCls, self.null_action, self.rngs, max_decorrelation_steps
        )
        step = self.step
        step.observation[:], step.action[:], step.reward[:] = inputs
        step.done[:] = False
        return None, traj_infos

    def collect_batch(
        self, agent_inputs: Any, traj_infos: list[TrajInfo], itr: int
    ) -> tuple[Any, list[TrajInfo], list[TrajInfo]]:
        env_buf, step = self.samples_np.env, self.step
        # Wait-reset: the envs done earlier in this batch.
        waiting = None if self.mid_batch_reset else np.zeros(len(self.envs), bool)
        completed = []
        for t in range(self.batch_T):
            env_buf.observation[t] = step.observation
            self.act_ready.acquire()
            env_info = None if env_buf.env_info is None else env_buf.env_info[t]
            out = EnvStep(step.observation, step.reward, step.done, env_info)
            completed += step_envs(
                self.envs,
                step.observation,
                step.action,
                None,
                traj_infos,
                self.TrajInfoCls,
                out,
                waiting,
            )
            env_buf.reward[t], env_buf.done[t] = step.reward, step.done
            if waiting is not None and t == self.batch_T - 1:  # the server sees them fresh
                for b in np.flatnonzero(waiting):
                    step.observation[b] = self.envs[b].reset()
            self.obs_ready.release()
        return agent_inputs, traj_infos, completed


class GpuWaitResetCollector(GpuResetCollector):
    """A done env waits, recording blank steps with done=True, until the batch ends; then
    it resets (for recurrent agents trained without ``mid_batch_reset``)."""

    mid_batch_reset = False


class GpuEvalCollector:
    """Worker side of evaluation: step with the server's actions until it says stop."""

    def __init__(
        self,
        envs: list[Env],
        agent: SamplerAgent | None,
        TrajInfoCls: type[TrajInfo],
        max_T: int,
        *,
        step: AttrDict,
        act_ready: Gate,
        obs_ready: Gate,
    ):
        self.envs, self.TrajInfoCls, self.max_T = envs, TrajInfoCls, max_T
        self.step, self.act_ready, self.obs_ready = step, act_ready, obs_ready

    def collect_evaluation(
        self, itr: int, stop: Any = None, report: Callable[[TrajInfo], object] | None = None
    ) -> list[TrajInfo]:
        step = self.step
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        for b, env in enumerate(self.envs):
            step.observation[b], step.done[b] = env.reset(), True
        self.obs_ready.release()
        out = EnvStep(step.observation, step.reward, step.done, None)
        for _ in range(self.max_T):
            self.act_ready.acquire()
            if stop is not None and stop.value:
                break
            ended = step_envs(
                self.envs, step.observation, step.action, None, traj_infos, self.TrajInfoCls, out
            )
            if report is not None:
                for info in ended:
                    report(info)
            self.obs_ready.release()
        return []
