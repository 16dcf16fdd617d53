"""The rl-suite umbrella: every package's public names in one place, and the command line.

It re-exports rl-arrays, rl-replay, rl-samplers, rl-agents, rl-algos and rl-runners; rl-launch
joins when it is implemented.  A name two packages export is the same object in both (e.g.
``discount_return_n_step``, which rl-algos takes from rl-replay).
"""

from importlib.metadata import version

import rl_agents
import rl_algos
import rl_arrays
import rl_replay
import rl_runners
import rl_samplers
from rl_agents import *  # noqa: F403
from rl_algos import *  # noqa: F403
from rl_arrays import *  # noqa: F403
from rl_replay import *  # noqa: F403
from rl_runners import *  # noqa: F403
from rl_samplers import *  # noqa: F403

__version__ = version("rl-suite")

PACKAGES = (rl_arrays, rl_replay, rl_samplers, rl_agents, rl_algos, rl_runners)

__all__ = list(dict.fromkeys(name for package in PACKAGES for name in package.__all__))
