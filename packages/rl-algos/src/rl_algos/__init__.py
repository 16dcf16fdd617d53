"""rl-algos: reinforcement learning algorithms for rl-suite, and their return utilities.

So far: the on-policy actor-critics ``A2C`` and ``PPO`` (feed-forward and recurrent agents) on
their ``PolicyGradientAlgo`` base; the replay-based Q-learners ``DQN``, ``CategoricalDQN`` and
``R2D1``; and the return / advantage functions for ``[T, B]`` data (numpy arrays or torch
tensors). Agents are reached only through the protocols declared here (``PgAgentLike``,
``QAgentLike``, ``CatQAgentLike``, ``R2d1AgentLike``); batches are ``rl_arrays.Samples``.
"""

from importlib.metadata import version as _version

from rl_replay import discount_return_n_step

from ._a2c import A2C
from ._cat_dqn import CategoricalDQN, categorical_projection
from ._dqn import DQN, DqnOptInfo, huber_loss
from ._pg import OptInfo, PolicyGradientAlgo
from ._ppo import PPO, LossInputs, PpoOptInfo
from ._protocols import (
    CatQAgentLike,
    PgAgentLike,
    PgDistributionLike,
    QAgentLike,
    R2d1AgentLike,
)
from ._r2d1 import R2D1, R2d1OptInfo, inv_value_rescale, sequence_priorities, value_rescale
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
    "DQN",
    "PPO",
    "R2D1",
    "CatQAgentLike",
    "CategoricalDQN",
    "DqnOptInfo",
    "LossInputs",
    "OptInfo",
    "PgAgentLike",
    "PgDistributionLike",
    "PolicyGradientAlgo",
    "PpoOptInfo",
    "QAgentLike",
    "R2d1AgentLike",
    "R2d1OptInfo",
    "categorical_projection",
    "discount_return",
    "discount_return_n_step",
    "discount_return_tl",
    "generalized_advantage_estimation",
    "generalized_advantage_estimation_tl",
    "huber_loss",
    "inv_value_rescale",
    "sequence_priorities",
    "valid_from_done",
    "value_rescale",
]
