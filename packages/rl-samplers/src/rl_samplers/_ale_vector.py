"""Atari games on ale-py's own vector env: every game steps in ALE's C++ threads, no Python
runs per environment.

``AleVectorEnv`` drives ``ale_py.vector_env.AtariVectorEnv`` (ale-py 0.12 or later, the
``[atari]`` extra, imported when the first one is built) with ``AtariEnv``'s preprocessing
and defaults, so that the same models and algorithms train on either.  It is a ``BatchEnv``
rather than the gymnasium ``VectorEnv`` itself because the raw game score and the game's
end (with episodic lives) must reach the trajectory infos, as extras of ``step``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import torch

from rl_arrays import as_count, normalize_device

from ._atari import resolve_game
from ._batched import TRAJ_DONE, BatchEnv
from ._spaces import IntBox

__all__ = ["AleVectorEnv"]

_MAX_FRAMES = 2**31 - 1  # ALE's frame limit per game when there is no horizon


def _import_vector_env() -> Any:
    """ale-py's ``AtariVectorEnv``, or an ImportError that says what to install."""
    hint = (
        "AleVectorEnv needs ale-py 0.12 or later (same-step autoreset): pip install 'ale-py>=0.12'"
    )
    try:
        import ale_py
        from ale_py.vector_env import AtariVectorEnv
    except ImportError as err:
        raise ImportError(f"{hint} (or rl-samplers[atari]); {err}") from err
    version = tuple(int(part) for part in re.findall(r"\d+", ale_py.__version__)[:2])
    if version < (0, 12):
        raise ImportError(f"{hint}; ale-py {ale_py.__version__} is installed")
    return AtariVectorEnv


def _ale_noop_max(max_start_noops: int, fire_on_reset: bool) -> int:
    """ALE's ``noop_max`` for ``AtariEnv``'s ``max_start_noops``: ALE idles ``u`` frames,
    ``u`` uniform in ``[0, noop_max - 1]`` (``AtariEnv``: ``[0, max_start_noops]``); with
    FIRE it presses FIRE first and counts it as one of the ``u``, hence one more."""
    if max_start_noops == 0:
        return 0  # (FIRE alone, if asked for)
    return max_start_noops + 1 + int(fire_on_reset)


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):  # (Linux: the cores this process may run on)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class AleVectorEnv(BatchEnv):
    """``num_envs`` Atari games stepped together by ale-py's vector env, each as one
    ``AtariEnv`` with the same arguments would be: uint8 observations ``(num_img_obs,
    *obs_size)``, rewards clipped to their sign (``clip_reward``), a life loss ``done``
    (``episodic_lives``), ``horizon`` steps per game, then a time-out.

    ``num_threads``: ALE's stepping threads (default: one per core this process may use, at
    most ``num_envs``); ``device``: where observations (still uint8), rewards and dones are
    put.  ``step``'s extras: ``GameScore``, the raw reward (summed into the trajectory
    infos), and ``traj_done``, the game's end (game over or time-out): a trajectory spans
    all lives, as with ``AtariEnv`` and ``AtariTrajInfo``.  ``max_start_noops``: 0 to that
    many idle frames at a game's start, as ``AtariEnv``.  Where ALE's preprocessing differs
    from ``AtariEnv``'s (the frame resize, FIRE before the no-ops and only after a full
    reset, the frame stack kept at a life loss): README ("Atari on ale-py's vector env").
    """

    traj_info_fields = ("GameScore",)

    def __init__(
        self,
        game: str = "pong",
        num_envs: int = 1,
        *,
        num_threads: int | None = None,
        frame_skip: int = 4,
        num_img_obs: int = 4,
        clip_reward: bool = True,
        episodic_lives: bool = True,
        fire_on_reset: bool = False,
        max_start_noops: int = 30,
        repeat_action_probability: float = 0.0,
        horizon: int | None = 27000,
        obs_size: tuple[int, int] = (104, 80),
        device: str | torch.device = "cpu",
    ):
        AtariVectorEnv = _import_vector_env()
        from gymnasium.vector import AutoresetMode

        self.game = resolve_game(game)
        self.num_envs = as_count("num_envs", num_envs, 1, expected="an int >= 1")
        if num_threads is None:
            num_threads = min(self.num_envs, _usable_cpus())
        num_threads = as_count("num_threads", num_threads, 1, expected="an int >= 1 or None")
        frame_skip = as_count("frame_skip", frame_skip, 1, expected="an int >= 1")
        num_img_obs = as_count("num_img_obs", num_img_obs, 1, expected="an int >= 1")
        noops = as_count("max_start_noops", max_start_noops, 0, expected="an int >= 0")
        rap = float(repeat_action_probability)
        if not 0.0 <= rap <= 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {rap!r}")
        max_frames = _MAX_FRAMES
        if horizon is not None:
            horizon = as_count("horizon", horizon, 1, expected="an int >= 1 or None")
            max_frames = min(horizon * frame_skip, _MAX_FRAMES)
        try:
            height, width = (as_count("obs_size", s, 1) for s in obs_size)
        except (TypeError, ValueError):
            raise ValueError(
                f"obs_size must be (height, width), two positive ints, got {obs_size!r}"
            ) from None
        self.device = normalize_device(device)
        self._clip_reward = bool(clip_reward)
        self._episodic_lives = bool(episodic_lives)
        self._env = AtariVectorEnv(
            self.game,
            self.num_envs,
            num_threads=num_threads,
            autoreset_mode=AutoresetMode.SAME_STEP,
            img_height=height,
            img_width=width,
            grayscale=True,
            stack_num=num_img_obs,
            frameskip=frame_skip,
            maxpool=True,
            noop_max=_ale_noop_max(noops, bool(fire_on_reset)),
            episodic_life=False,  # (that one restarts the game at each life loss)
            life_loss_info=False,  # (terminated: the game is over; life losses are found here)
            reward_clipping=False,  # (clipped here: the raw reward is the game score)
            use_fire_reset=bool(fire_on_reset),
            repeat_action_probability=rap,
            max_num_frames_per_episode=max_frames,
            full_action_space=False,
        )
        actions = self._env.ale.get_action_set()
        if fire_on_reset and "FIRE" not in [a.name for a in actions]:
            self.close()
            raise ValueError(
                f"fire_on_reset=True, but {self.game!r} has no FIRE action "
                f"(its actions: {', '.join(a.name for a in actions)})"
            )
        self.observation_space = IntBox(0, 256, shape=(num_img_obs, height, width), dtype="uint8")
        self._n_actions = len(actions)
        self.action_space = IntBox(0, self._n_actions)
        self._lives = np.zeros(self.num_envs, np.int32)
        self._seeds: np.ndarray | None = None

    @property
    def vector_env(self) -> Any:
        """The underlying ``ale_py.vector_env.AtariVectorEnv`` (for inspection)."""
        return self._env

    def seed(self, seed: int | None) -> None:
        """Seed the next ``reset``: env ``b`` gets its own seed drawn from ``seed`` (ALE's
        randomness and start no-ops); ``None`` draws fresh entropy."""
        if seed is None:
            self._seeds = None
        else:
            state = np.random.SeedSequence(seed).generate_state(self.num_envs)
            self._seeds = (state & 0x7FFFFFFF).astype(np.int64)  # (ALE takes int32 seeds)

    def reset(self) -> torch.Tensor:
        observation, info = self._env.reset(seed=self._seeds)
        self._seeds = None  # later games continue each env's random stream
        self._lives = info["lives"]
        return self._to_device(observation)

    def step(self, action: Any) -> tuple[Any, ...]:
        """``(observation, reward, terminated, truncated, extras)``, a done env already
        reset (its next episode's first observation)."""
        actions = np.asarray(torch.as_tensor(action).cpu(), dtype=np.int64)  # (one host read)
        n = self._n_actions
        if actions.shape != (self.num_envs,):
            raise ValueError(f"action must have shape ({self.num_envs},), got {actions.shape}")
        if actions.min() < 0 or actions.max() >= n:  # (out of range, ALE hangs)
            raise ValueError(f"action must be in range({n}), got {actions.min()}..{actions.max()}")
        observation, score, game_over, truncated, info = self._env.step(actions)
        # A game that ended (over or timed out) was reset in this step: its ``lives`` are
        # the new game's, which can be fewer than the old game's last (Amidar starts at 0),
        # so they say nothing about a life loss there.
        traj_done = game_over | truncated
        lives = info["lives"]
        life_lost = (lives < self._lives) & ~traj_done
        self._lives = lives
        terminated = game_over | life_lost if self._episodic_lives else game_over
        game_score = score.astype(np.float32)
        reward = np.sign(game_score) if self._clip_reward else game_score
        extras = {TRAJ_DONE: self._to_device(traj_done), "GameScore": self._to_device(game_score)}
        return (
            self._to_device(observation),
            self._to_device(reward),
            self._to_device(terminated),
            self._to_device(truncated),
            extras,
        )

    def close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return (
            f"AleVectorEnv(game={self.game!r}, num_envs={self.num_envs}, "
            f"actions={self._n_actions}, obs={self.observation_space.shape})"
        )

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)
