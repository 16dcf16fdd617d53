"""Models, action distributions and agents for rl-suite.

Policy-gradient agents (categorical and Gaussian, feed-forward and recurrent, for Atari,
MuJoCo-style and classic-control tasks), the distributions they sample from and score with, the model
building blocks, and the recurrent-state mixins. Depends on rl-arrays and torch only.
"""

from importlib.metadata import version

from ._base_agent import AlternatingRecurrentAgentMixin, BaseAgent, RecurrentAgentMixin
from ._distributions import (
    Categorical,
    CategoricalEpsilonGreedy,
    DiscreteMixin,
    DistInfo,
    DistInfoStd,
    Distribution,
    EpsilonGreedy,
    Gaussian,
)
from ._model_components import Conv2dHeadModel, Conv2dModel, MlpModel, RunningMeanStdModel
from ._model_utils import (
    ScaleGrad,
    conv2d_output_shape,
    scale_grad,
    strip_ddp_state_dict,
    update_state_dict,
)
from ._pg_agents import (
    AgentInfo,
    AgentInfoRnn,
    AlternatingAtariLstmAgent,
    AlternatingMujocoLstmAgent,
    AlternatingRecurrentCategoricalPgAgent,
    AlternatingRecurrentGaussianPgAgent,
    AtariFfAgent,
    AtariLstmAgent,
    AtariMixin,
    CategoricalFfAgent,
    CategoricalLstmAgent,
    CategoricalPgAgent,
    GaussianPgAgent,
    MujocoFfAgent,
    MujocoLstmAgent,
    MujocoMixin,
    RecurrentCategoricalPgAgent,
    RecurrentCategoricalPgAgentBase,
    RecurrentGaussianPgAgent,
    RecurrentGaussianPgAgentBase,
    VectorCategoricalMixin,
)
from ._pg_models import (
    AtariFfModel,
    AtariLstmModel,
    CategoricalFfModel,
    CategoricalLstmModel,
    MujocoFfModel,
    MujocoLstmModel,
    RnnState,
)

__version__ = version("rl-agents")

__all__ = [
    "AgentInfo",
    "AgentInfoRnn",
    "AlternatingAtariLstmAgent",
    "AlternatingMujocoLstmAgent",
    "AlternatingRecurrentAgentMixin",
    "AlternatingRecurrentCategoricalPgAgent",
    "AlternatingRecurrentGaussianPgAgent",
    "AtariFfAgent",
    "AtariFfModel",
    "AtariLstmAgent",
    "AtariLstmModel",
    "AtariMixin",
    "BaseAgent",
    "Categorical",
    "CategoricalEpsilonGreedy",
    "CategoricalFfAgent",
    "CategoricalFfModel",
    "CategoricalLstmAgent",
    "CategoricalLstmModel",
    "CategoricalPgAgent",
    "Conv2dHeadModel",
    "Conv2dModel",
    "DiscreteMixin",
    "DistInfo",
    "DistInfoStd",
    "Distribution",
    "EpsilonGreedy",
    "Gaussian",
    "GaussianPgAgent",
    "MlpModel",
    "MujocoFfAgent",
    "MujocoFfModel",
    "MujocoLstmAgent",
    "MujocoLstmModel",
    "MujocoMixin",
    "RecurrentAgentMixin",
    "RecurrentCategoricalPgAgent",
    "RecurrentCategoricalPgAgentBase",
    "RecurrentGaussianPgAgent",
    "RecurrentGaussianPgAgentBase",
    "RnnState",
    "RunningMeanStdModel",
    "ScaleGrad",
    "VectorCategoricalMixin",
    "conv2d_output_shape",
    "scale_grad",
    "strip_ddp_state_dict",
    "update_state_dict",
]
