"""A trained agent in one call: ``rl_suite.load(run)`` and ``predict``, as SB3 users expect."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_arrays import buffer_method, buffer_to, torchify_buffer

from ._choices import env_kwargs, make_agent, probe_spaces
from ._envs import make_env
from ._evaluate import evaluation_config, load_weights
from ._run_files import load_config, read_run_checkpoint, run_dir_of, settings_of

__all__ = ["TrainedAgent", "load"]


def load(path: str | Path, device: str | torch.device = "cpu") -> TrainedAgent:
    """The agent of a run directory's latest checkpoint (or of one checkpoint file,
    ``itr_<n>.pt``), on ``device``, ready to act on raw observations of the environment it
    was trained on: ``action, _ = load(run).predict(observation)``. Its observation
    normalisation statistics come with it."""
    run_dir, checkpoint = run_dir_of(path, None)
    config = evaluation_config(load_config(run_dir), run_dir)
    checkpoint_path, saved = read_run_checkpoint(run_dir if checkpoint is None else checkpoint)
    spaces = probe_spaces(config)
    with settings_of(run_dir / "params.json"):
        agent = make_agent(config, spaces, deterministic_eval=False)
    agent.initialize(spaces)
    load_weights(agent, saved, checkpoint_path, run_dir)
    device = torch.device(device)
    agent.to_device((device.index or 0) if device.type == "cuda" else None)
    return TrainedAgent(agent, config, spaces, checkpoint_path, device)


class TrainedAgent:
    """A trained agent acting on an environment's observations (see :func:`load`).

    ``predict(observation, state=None, episode_start=None, deterministic=False)`` returns
    ``(action, state)`` as SB3's does: one observation (the environment's shape) gives one
    action, a batch ``[B, ...]`` gives ``B``. ``deterministic=True`` acts as the run's
    deterministic evaluation (the most likely action, the Gaussian's mean, the greedy
    Q-value); ``False`` as the agent acts in training once learning has started (sampled
    actions; epsilon-greedy at its final epsilon; DDPG and TD3 with their exploration noise).
    A recurrent agent keeps its state inside: ``state`` is always None, ``episode_start``
    (one flag per observation) restarts the episodes it marks, and ``prev_reward`` gives the
    rewards of the previous actions to a model that reads them (zeros when not given).
    ``make_env()`` makes the environment as it was trained (``env_id``, ``config``).
    """

    def __init__(
        self,
        agent: Any,
        config: dict[str, Any],
        spaces: Any,
        checkpoint: Path,
        device: torch.device,
    ):
        self.agent = agent
        self.config = config
        self.env_id: str = config["env"]
        self.observation_space = spaces.observation
        self.action_space = spaces.action
        self.checkpoint = checkpoint
        self.device = device
        self.recurrent = bool(getattr(agent, "recurrent", False))
        self._deterministic = agent.inference_policy(device)
        self._batch: int | None = None  # observations per call, for the recurrent state
        self._prev_action: torch.Tensor | None = None
        agent.sample_mode(2**62)  # (past any warm-up: the agent's trained behaviour)

    def make_env(self) -> Any:
        """The environment the agent was trained on, with the run's ``env_kwargs``."""
        return make_env(**env_kwargs(self.config))

    @torch.no_grad()
    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        prev_reward: Any = None,
    ) -> tuple[np.ndarray, None]:
        if state is not None:
            raise ValueError(
                "state: this agent keeps its recurrent state inside; pass None and mark new "
                "episodes with episode_start"
            )
        obs, single = self._as_batch(observation)
        batch = int(next(iter(obs)).shape[0]) if hasattr(obs, "_fields") else obs.shape[0]
        self._track_episodes(batch, episode_start)
        reward = torch.zeros(batch, device=self.device)
        if prev_reward is not None:
            reward[:] = torch.as_tensor(np.asarray(prev_reward, dtype=np.float32).reshape(-1))
        if deterministic:
            action = (
                self._deterministic(obs, reward) if self.recurrent else self._deterministic(obs)
            )
        else:
            action = self.agent.step(obs, self._previous_action(batch), reward).action
            self._prev_action = torch.as_tensor(action)
        action = buffer_to(action, "cpu").numpy()
        return (action[0] if single else action), None

    def _as_batch(self, observation: Any) -> tuple[Any, bool]:
        if hasattr(self.observation_space, "names"):
            return self._as_dict_batch(observation)
        shape = tuple(self.observation_space.shape)
        obs = torch.as_tensor(np.asarray(observation), device=self.device)
        if tuple(obs.shape) == shape:
            return obs.unsqueeze(0), True
        if tuple(obs.shape[1:]) == shape:
            return obs, False
        raise ValueError(
            f"observation of shape {tuple(obs.shape)}: {self.env_id} gives {shape} (or a "
            f"batch [B, {', '.join(map(str, shape))}])"
        )

    def _as_dict_batch(self, observation: Any) -> tuple[Any, bool]:
        """A gymnasium ``Dict`` (or ``Tuple``) observation (one, or a batch: every value
        ``[B, ...]``) as the namedarraytuple of tensors the agent takes, with a leading batch
        dim."""
        parts = self.observation_space.gym_space.spaces
        if isinstance(parts, Mapping):
            keys: list[Any] = [str(k) for k in parts]
            if not isinstance(observation, Mapping) or set(observation) != set(keys):
                got = sorted(observation) if isinstance(observation, Mapping) else observation
                raise ValueError(
                    f"{self.env_id} gives Dict observations with keys {keys}, got {got!r:.200}"
                )
        else:
            keys = list(range(len(parts)))
            if not isinstance(observation, (tuple, list)) or len(observation) != len(parts):
                raise ValueError(
                    f"{self.env_id} gives Tuple observations of {len(parts)} parts, got {observation!r:.200}"
                )
        value = torchify_buffer(self.observation_space.convert(observation))
        first, shape = next(iter(value)), tuple(next(iter(self.observation_space.shape)))
        single = tuple(first.shape) == shape
        if not single and tuple(first.shape[1:]) != shape:
            raise ValueError(
                f"observation[{keys[0]!r}] of shape {tuple(first.shape)}: {self.env_id} gives "
                f"{shape} (or a batch [B, {', '.join(map(str, shape))}])"
            )
        value = buffer_to(value, self.device)
        return (buffer_method(value, "unsqueeze", 0) if single else value), single

    def _track_episodes(self, batch: int, episode_start: Any) -> None:
        """Restart the recurrent state of the observations ``episode_start`` marks (all of
        them when the batch size changes)."""
        if not self.recurrent:
            return
        if batch != self._batch:
            self._batch, self._prev_action = batch, None
            self.agent.reset()
            self._deterministic.reset()
            return
        if episode_start is None:
            return
        starts = torch.as_tensor(np.asarray(episode_start, dtype=bool).reshape(batch))
        if starts.any():
            self._deterministic.reset(starts)
            for b in torch.nonzero(starts).flatten().tolist():
                self.agent.reset_one(b)
                if self._prev_action is not None:
                    self._prev_action[b] = 0

    def _previous_action(self, batch: int) -> torch.Tensor:
        """The previous actions (the null action at an episode's start): what feed-forward
        models ignore and recurrent ones read."""
        if self._prev_action is None or self._prev_action.shape[0] != batch:
            null = self.action_space.null_value()
            return torch.as_tensor(np.stack([null] * batch), device=self.device)
        return self._prev_action.to(self.device)
