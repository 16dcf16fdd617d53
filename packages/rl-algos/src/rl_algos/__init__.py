"""rl-algos: reinforcement learning algorithms for rl-suite, and their return utilities.

The on-policy actor-critics ``A2C`` and ``PPO`` (feed-forward and recurrent agents) on their
``PolicyGradientAlgo`` base; the replay-based Q-learners ``DQN``, ``CategoricalDQN`` and
``R2D1``; the replay-based actor-critics for continuous actions ``DDPG``, ``TD3`` and ``SAC``;
and the return / advantage functions for ``[T, B]`` data (numpy arrays or torch tensors),
with ``split_and_pad_trajectories`` / ``unpad_trajectories`` for episode-aligned recurrent data.
Agents are reached only through the protocols declared here (``PgAgentLike``, ``QAgentLike``,
``CatQAgentLike``, ``R2d1AgentLike``, ``DdpgAgentLike``, ``Td3AgentLike``, ``SacAgentLike``);
batches are ``rl_arrays.Samples``.
"""

from importlib.metadata import version as _version

from rl_replay import discount_return_n_step

from ._a2c import A2C
from ._cat_dqn import CategoricalDQN, categorical_projection
from ._ddpg import DDPG, DdpgOptInfo
from ._dqn import DQN, DqnOptInfo, huber_loss
from ._pg import OptInfo, PolicyGradientAlgo
from ._ppo import PPO, LossInputs, PpoOptInfo
from ._protocols import (
    CatQAgentLike,
    DdpgAgentLike,
    PgAgentLike,
    PgDistributionLike,
    QAgentLike,
    R2d1AgentLike,
    SacAgentLike,
    Td3AgentLike,
)
from ._r2d1 import R2D1, R2d1OptInfo, inv_value_rescale, sequence_priorities, value_rescale
from ._returns import (
    discount_return,
    discount_return_tl,
    generalized_advantage_estimation,
    generalized_advantage_estimation_tl,
    valid_from_done,
)
from ._sac import SAC, SacOptInfo
from ._td3 import TD3
from ._trajectories import split_and_pad_trajectories, unpad_trajectories

__version__ = _version("rl-algos")

__all__ = [
    "A2C",
    "DDPG",
    "DQN",
    "PPO",
    "R2D1",
    "SAC",
    "TD3",
    "CatQAgentLike",
    "CategoricalDQN",
    "DdpgAgentLike",
    "DdpgOptInfo",
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
    "SacAgentLike",
    "SacOptInfo",
    "Td3AgentLike",
    "categorical_projection",
    "discount_return",
    "discount_return_n_step",
    "discount_return_tl",
    "generalized_advantage_estimation",
    "generalized_advantage_estimation_tl",
    "huber_loss",
    "inv_value_rescale",
    "sequence_priorities",
    "split_and_pad_trajectories",
    "unpad_trajectories",
    "valid_from_done",
    "value_rescale",
]
