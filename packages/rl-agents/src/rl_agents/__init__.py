"""Models, action distributions and agents (policy gradient, DQN family, Q-policy-gradient)."""

from importlib.metadata import version

__version__ = version("rl-agents")

__all__: list[str] = []
