"""Training runners (minibatch, synchronous, asynchronous), logger and checkpoints."""

from importlib.metadata import version

__version__ = version("rl-runners")

__all__: list[str] = []
