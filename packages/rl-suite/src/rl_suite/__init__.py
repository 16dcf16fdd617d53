"""The rl-suite umbrella: every package's public names in one place, the trainer and its
command line.

It re-exports rl-arrays, rl-replay, rl-samplers, rl-agents, rl-algos, rl-runners and rl-launch,
and adds the trainer: ``make_config`` (defaults, ``PRESETS``, overrides), ``build`` / ``train``
/ ``resume`` / ``evaluate`` for run directories, ``plot_runs`` for learning curves, and the
sweeps of ``rl-suite sweep`` (``load_sweep``, ``run_sweep``).  A name two packages export is the same object in both (e.g.
``discount_return_n_step``, which rl-algos takes from rl-replay).
"""

from importlib.metadata import version

import rl_agents
import rl_algos
import rl_arrays
import rl_launch
import rl_replay
import rl_runners
import rl_samplers
from rl_agents import *  # noqa: F403
from rl_algos import *  # noqa: F403
from rl_arrays import *  # noqa: F403
from rl_launch import *  # noqa: F403
from rl_replay import *  # noqa: F403
from rl_runners import *  # noqa: F403
from rl_samplers import *  # noqa: F403

from ._config import PRESETS, apply_overrides, make_config  # noqa: F401 (in TRAINER)
from ._evaluate import evaluate  # noqa: F401
from ._load import TrainedAgent, load  # noqa: F401
from ._plot import plot_runs  # noqa: F401
from ._run_files import load_config  # noqa: F401
from ._stopped import RunStopped  # noqa: F401
from ._sweep import load_sweep  # noqa: F401
from ._sweep_launch import run_sweep  # noqa: F401
from ._trainer import build, resume, train  # noqa: F401

__version__ = version("rl-suite")

PACKAGES = (rl_arrays, rl_replay, rl_samplers, rl_agents, rl_algos, rl_runners, rl_launch)

TRAINER = [
    "PRESETS",
    "RunStopped",
    "TrainedAgent",
    "apply_overrides",
    "build",
    "evaluate",
    "load",
    "load_config",
    "load_sweep",
    "make_config",
    "plot_runs",
    "resume",
    "run_sweep",
    "train",
]

__all__ = list(dict.fromkeys([name for package in PACKAGES for name in package.__all__] + TRAINER))
