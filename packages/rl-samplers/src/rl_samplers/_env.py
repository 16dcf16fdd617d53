"""The environment interface every sampler steps: numpy in, numpy out."""

from __future__ import annotations

from typing import Any

from rl_arrays import EnvSpaces, EnvStep

from ._spaces import Space

__all__ = ["Env"]


class Env:
    """A task: ``reset() -> observation``, ``step(action) -> EnvStep(observation, reward,
    done, env_info)``.

    ``env_info`` is a namedtuple with the same fields and dtypes at every step (samplers
    pre-allocate memory for it).  ``done`` ends the step's episode; when it came from a
    time limit, ``env_info.timeout`` is true so algorithms can bootstrap through it.
    Subclasses set ``self._observation_space`` and ``self._action_space``.
    """

    _observation_space: Space
    _action_space: Space

    def step(self, action: Any) -> EnvStep:
        """Advance one step with ``action`` (an element of the action space)."""
        raise NotImplementedError

    def reset(self) -> Any:
        """Start a new episode; return its first observation."""
        raise NotImplementedError

    def seed(self, seed: int | None) -> None:
        """Seed the environment's randomness (applied at the next ``reset``)."""
        self._action_space.seed(seed)

    @property
    def observation_space(self) -> Space:
        return self._observation_space

    @property
    def action_space(self) -> Space:
        return self._action_space

    @property
    def spaces(self) -> EnvSpaces:
        return EnvSpaces(observation=self.observation_space, action=self.action_space)

    @property
    def horizon(self) -> int | None:
        """The most steps an episode can last, if the environment has a limit."""
        return None

    def close(self) -> None:
        """Release the environment's resources."""
