"""RL algorithms (A2C, PPO, DQN family, CatDQN, R2D1, DDPG, TD3, SAC) and return utilities."""

from importlib.metadata import version

__version__ = version("rl-algos")

__all__: list[str] = []
