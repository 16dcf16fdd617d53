"""Replay buffers: n-step, frame, time-limit, uniform, prioritized, sequence and async."""

from importlib.metadata import version

__version__ = version("rl-replay")

__all__: list[str] = []
