"""CartPole and Pendulum as ``BatchEnv``s: gymnasium's classic-control dynamics written in
torch, so thousands of environments step in a few kernel launches on the training device.

They follow gymnasium's ``CartPole-v1`` and ``Pendulum-v1`` (with their ``TimeLimit``) step
for step, computing in ``dtype`` (float32 by default: a trajectory drifts from gymnasium's
float64 by rounding; ``torch.float64`` agrees to a few ulps).  ``env.state`` and
``env.elapsed`` may be read or set between steps.  ``observation`` and
``critic_observation`` (``"full"`` or ``"positions"``) choose what the policy and the critic
see.  The README ("TorchCartPole and TorchPendulum") has the details.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import torch

from rl_arrays import as_count, normalize_device

from ._batched import CRITIC_OBSERVATION, BatchEnv
from ._spaces import FloatBox, IntBox

__all__ = ["TorchCartPole", "TorchPendulum"]


class _TorchClassicEnv(BatchEnv):
    """Shared machinery: argument checks, the seeded generator, the time limit and the
    reset of done envs inside ``step`` (drawn for every env and kept where done, so no
    host synchronisation).  Subclasses give the physics."""

    state_size: int
    # The entries of the full observation that each observation kind shows.
    observation_kinds: ClassVar[dict[str, tuple[int, ...]]]
    max_episode_steps: int
    dtype: torch.dtype
    generator: torch.Generator
    elapsed: torch.Tensor  # steps into each env's episode, [B] int64
    observation_kind: str
    critic_observation_kind: str | None
    _columns: dict[str, torch.Tensor | None]

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str | int,
        max_episode_steps: int,
        seed: int | None,
        dtype: torch.dtype,
        observation: str = "full",
        critic_observation: str | None = None,
    ):
        name = type(self).__name__
        num_envs = as_count(f"{name}: num_envs", num_envs, 1)
        max_episode_steps = as_count(f"{name}: max_episode_steps", max_episode_steps, 1)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{name}: dtype must be torch.float32 or torch.float64, got {dtype}")
        try:  # (an unavailable device fails here, not later)
            self.device = normalize_device(device)  # "cuda" is cuda:<current>, as tensors say
            self.generator = torch.Generator(self.device)
        except Exception as error:  # torch raises several types for a missing backend
            raise ValueError(f"{name}: device={device!r} is not a usable torch device") from error
        kinds = sorted(self.observation_kinds)
        if not isinstance(observation, str) or observation not in self.observation_kinds:
            raise ValueError(f"{name}: observation must be one of {kinds}, got {observation!r}")
        if critic_observation is not None and (
            not isinstance(critic_observation, str)
            or critic_observation not in self.observation_kinds
        ):
            raise ValueError(
                f"{name}: critic_observation must be None or one of {kinds}, "
                f"got {critic_observation!r}"
            )
        self.num_envs, self.max_episode_steps, self.dtype = num_envs, max_episode_steps, dtype
        self._state: torch.Tensor | None = None
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.seed(seed)
        self.observation_kind, self.critic_observation_kind = observation, critic_observation
        # Device tensors of the columns to keep (None: the whole full observation).
        self._columns = {
            kind: None
            if len(columns) == len(self.observation_kinds["full"])
            else torch.tensor(columns, device=self.device)
            for kind, columns in self.observation_kinds.items()
        }
        high = self._observation_high()
        self.observation_space = self._part_space(high, observation)
        if critic_observation is not None:
            self.critic_observation_space = self._part_space(high, critic_observation)

    def _part_space(self, high: np.ndarray, kind: str) -> FloatBox:
        columns = list(self.observation_kinds[kind])
        return FloatBox(-high[columns], high[columns])

    def _part(self, full: torch.Tensor, kind: str) -> torch.Tensor:
        columns = self._columns[kind]
        return full if columns is None else full.index_select(-1, columns)

    def _observations(self, state: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The observation and the extras (the critic's observation, when it has one)."""
        full = self._observe(state)
        observation = self._part(full, self.observation_kind)
        if self.critic_observation_kind is None:
            return observation, {}
        return observation, {CRITIC_OBSERVATION: self._part(full, self.critic_observation_kind)}

    def seed(self, seed: int | None) -> None:
        """Reseed the generator at the next ``reset`` (``None``: from fresh entropy)."""
        self._next_seed, self._reseed = seed, True

    @property
    def state(self) -> torch.Tensor:
        """The physical state ``[B, state_size]`` in ``dtype``: the live tensor, so
        ``env.state[b] = ...`` edits it; ``step`` replaces it with a new one."""
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() first")
        return self._state

    @state.setter
    def state(self, value: torch.Tensor | npt.ArrayLike) -> None:
        self.state.copy_(torch.as_tensor(value))

    def reset(self) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Start every env's episode; return the observations ``[B, ...]`` (float32), and
        with a critic observation ``(observations, extras)``."""
        if self._reseed:
            if self._next_seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(int(self._next_seed))
            self._reseed = False
        self._state = self._initial_state()
        self.elapsed.zero_()
        observation, extras = self._observations(self._state)
        return observation if self.critic_observation_kind is None else (observation, extras)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], ...]:
        """One step of every env: ``(observation, reward, terminated, truncated)``, a done
        env's observation being its next episode's first; with a critic observation,
        ``extras`` (its ``"critic_observation"``, of the same states) comes fifth."""
        state, reward, terminated = self._physics(self.state, action)
        self.elapsed = self.elapsed + 1
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        self._state = torch.where(done[:, None], self._initial_state(), state)
        self.elapsed = self.elapsed.masked_fill(done, 0)
        observation, extras = self._observations(self._state)
        if self.critic_observation_kind is None:
            return observation, reward.to(torch.float32), terminated, truncated
        return observation, reward.to(torch.float32), terminated, truncated, extras

    def _uniform(self, high: torch.Tensor | float) -> torch.Tensor:
        """``[B, state_size]`` uniform in ``[-high, high)``."""
        shape = (self.num_envs, self.state_size)
        u = torch.rand(shape, generator=self.generator, device=self.device, dtype=self.dtype)
        return (2 * u - 1) * high

    def _initial_state(self) -> torch.Tensor:
        raise NotImplementedError

    def _physics(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(next state, reward, terminated)`` from ``state`` and ``action``."""
        raise NotImplementedError

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """The full observation ``[B, ...]`` (float32) of ``state``."""
        raise NotImplementedError

    def _observation_high(self) -> np.ndarray:
        """The full observation's upper bounds (the lower ones are their negatives)."""
        raise NotImplementedError


class TorchCartPole(_TorchClassicEnv):
    """gymnasium's ``CartPole-v1`` for ``num_envs`` envs: action 1 pushes the cart right,
    0 left; reward 1 every step (the terminating one too); terminated when the cart leaves
    ``[-2.4, 2.4]`` or the pole leans past 12 degrees; truncated after ``max_episode_steps``.
    The state starts uniform in ``[-0.05, 0.05)``, and the full observation is the state;
    ``"positions"`` is ``[x, theta]`` (see the module for ``observation`` and
    ``critic_observation``)."""

    state_size = 4
    observation_kinds: ClassVar[dict[str, tuple[int, ...]]] = {
        "full": (0, 1, 2, 3),
        "positions": (0, 2),
    }
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str | int = "cpu",
        max_episode_steps: int = 500,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        observation: str = "full",
        critic_observation: str | None = None,
    ):
        super().__init__(
            num_envs, device, max_episode_steps, seed, dtype, observation, critic_observation
        )
        self.action_space = IntBox(0, 2, dtype="int64")

    def _observation_high(self) -> np.ndarray:
        return np.array([2 * self.x_threshold, np.inf, 2 * self.theta_threshold, np.inf])

    def _initial_state(self) -> torch.Tensor:
        return self._uniform(0.05)

    def _physics(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # The same operations in the same order as gymnasium's, for float64 agreement.
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag).to(state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot  # explicit Euler: positions move with the old velocities
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold)
            | (theta > self.theta_threshold)
        )
        return torch.stack([x, x_dot, theta, theta_dot], -1), torch.ones_like(x), terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)


class TorchPendulum(_TorchClassicEnv):
    """gymnasium's ``Pendulum-v1`` for ``num_envs`` envs: action ``[B, 1]``, a torque
    clipped to ``[-2, 2]``; reward ``-(angle**2 + 0.1 * speed**2 + 0.001 * torque**2)`` with
    the angle wrapped to ``[-pi, pi)`` (upright is 0); speed clipped to ``[-8, 8]``; never
    terminated, truncated after ``max_episode_steps``.  The state (angle, speed) starts
    uniform in ``[-pi, pi) x [-1, 1)``; the full observation is ``[cos, sin, speed]``,
    ``"positions"`` is ``[cos, sin]``."""

    state_size = 2
    observation_kinds: ClassVar[dict[str, tuple[int, ...]]] = {
        "full": (0, 1, 2),
        "positions": (0, 1),
    }
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str | int = "cpu",
        max_episode_steps: int = 200,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        observation: str = "full",
        critic_observation: str | None = None,
    ):
        super().__init__(
            num_envs, device, max_episode_steps, seed, dtype, observation, critic_observation
        )
        self.action_space = FloatBox(-self.max_torque, self.max_torque, shape=(1,))
        self._high = torch.tensor([math.pi, 1.0], dtype=dtype, device=self.device)

    def _observation_high(self) -> np.ndarray:
        return np.array([1.0, 1.0, self.max_speed])

    def _initial_state(self) -> torch.Tensor:
        return self._uniform(self._high)

    def _physics(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        th, thdot = state.unbind(-1)
        # The torque stays float32 like gymnasium's (its action space's dtype); torch then
        # promotes exactly where numpy does.
        u = action.reshape(self.num_envs).to(torch.float32).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = angle.square() + 0.1 * thdot.square() + 0.001 * u.square()
        g, m, l, dt = self.g, self.m, self.l, self.dt  # noqa: E741
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        next_state = torch.stack([newth, newthdot], -1).to(state.dtype)
        return next_state, -costs, torch.zeros_like(th, dtype=torch.bool)

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(-1)
        return torch.stack([torch.cos(th), torch.sin(th), thdot], -1).to(torch.float32)
