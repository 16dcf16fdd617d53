"""rl-algos: reinforcement learning algorithms for rl-suite, and their return utilities.

So far: the on-policy actor-critics ``A2C`` and ``PPO`` (feed-forward and recurrent agents) on
their ``PolicyGradientAlgo`` base, and the return / advantage functions for ``[T, B]`` data
(numpy arrays or torch tensors). Agents are reached only through the ``PgAgentLike`` protocol;
batches are ``rl_arrays.Samples``.
"""

from importlib.metadata import version as _version

from rl_replay import discount_return_n_step

from ._a2c import A2C
from ._pg import OptInfo, PolicyGradientAlgo
from ._ppo import PPO, LossInputs, PpoOptInfo
from ._protocols import PgAgentLike, PgDistributionLike
from ._returns import (
    discount_return,
    discount_return_tl,
    generalized_advantage_estimation,
    generalized_advantage_estimation_tl,
    valid_from_done,
)

__version__ = _version("rl-algos")

__all__ = [
    "A2C",
    "PPO",
    "LossInputs",
    "OptInfo",
    "PgAgentLike",
    "PgDistributionLike",
    "PolicyGradientAlgo",
    "PpoOptInfo",
    "discount_return",
    "discount_return_n_step",
    "discount_return_tl",
    "generalized_advantage_estimation",
    "generalized_advantage_estimation_tl",
    "valid_from_done",
]
