"""The rl-suite umbrella: every package's public names in one place, and the command line.

So far it re-exports rl-arrays, rl-replay and rl-samplers; each package joins as it is
implemented.
"""

from importlib.metadata import version

import rl_arrays
import rl_replay
import rl_samplers
from rl_arrays import *  # noqa: F403
from rl_replay import *  # noqa: F403
from rl_samplers import *  # noqa: F403

__version__ = version("rl-suite")

__all__ = [*rl_arrays.__all__, *rl_replay.__all__, *rl_samplers.__all__]
