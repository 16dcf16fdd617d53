"""Environments (gymnasium, Atari), trajectory info, collectors and samplers."""

from importlib.metadata import version

__version__ = version("rl-samplers")

__all__: list[str] = []
