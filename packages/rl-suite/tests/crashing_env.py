"""CartPoles that misbehave: one that ends its process once, midway (the Ray sweep tests' trial
that dies), one whose rewards turn NaN (the non-finite guard's tests).

``gymnasium.make("crashing_env:CrashOnceCartPole-v1", crash_at=N, marker=PATH)`` imports
this module (it must be importable: the tests put this folder on PYTHONPATH for Ray's
workers) and makes a CartPole whose N-th step ends the process with ``os._exit`` unless
``marker`` exists, which it creates first: one crash in all the processes of a test.
"""

import os
from pathlib import Path
from typing import Any

import gymnasium


class CrashOnce(gymnasium.Wrapper):
    def __init__(self, crash_at: int, marker: str, **kwargs: Any):
        super().__init__(gymnasium.make("CartPole-v1", **kwargs))
        self.crash_at, self.marker, self.steps = crash_at, Path(marker), 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.crash_at and not self.marker.exists():
            self.marker.touch()
            os._exit(1)  # as a killed process: no exception, no clean-up
        return self.env.step(action)


gymnasium.register("CrashOnceCartPole-v1", entry_point=CrashOnce)


class NanRewards(gymnasium.Wrapper):
    """CartPole whose rewards turn NaN from the ``nan_at``-th step on (the run must stop)."""

    def __init__(self, nan_at: int, **kwargs: Any):
        super().__init__(gymnasium.make("CartPole-v1", **kwargs))
        self.nan_at, self.steps = nan_at, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        return (
            observation,
            float("nan") if self.steps >= self.nan_at else reward,
            terminated,
            truncated,
            info,
        )


gymnasium.register("NanRewardCartPole-v1", entry_point=NanRewards)
