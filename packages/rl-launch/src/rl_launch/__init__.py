"""Hardware affinity, experiment variants and a local experiment queue and launcher."""

from importlib.metadata import version

__version__ = version("rl-launch")

__all__: list[str] = []
