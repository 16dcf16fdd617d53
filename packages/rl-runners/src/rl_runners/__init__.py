"""Training runners, the logger, checkpoints and exact resume.

``MinibatchRl`` / ``MinibatchRlEval`` alternate ``sampler.obtain_samples`` and
``algo.optimize_agent``, logging through ``logger`` (rlpyt's logger calls) into the run
directory that ``logger_context`` sets up, with checkpoints that ``resume`` continues exactly.
``OnPolicyRunner`` offers rsl_rl's calls (``learn``, ``save``, ``load``,
``get_inference_policy``) on the same loop.
"""

from importlib.metadata import version

from ._async_rl import AsyncRl, AsyncRlBase, AsyncRlEval
from ._checkpoint import atomic_write, companion_path, find_checkpoint, load_checkpoint
from ._logger import SNAPSHOT_MODES, Logger, logger, logger_context
from ._minibatch_rl import CHECKPOINT_FORMAT, MinibatchRl, MinibatchRlBase, MinibatchRlEval
from ._on_policy import DeployedPolicy, OnPolicyRunner
from ._prog_bar import ProgBarCounter
from ._protocols import (
    AgentProtocol,
    AlgoProtocol,
    AsyncAgentProtocol,
    AsyncAlgoProtocol,
    AsyncSamplerProtocol,
    InferenceAgentProtocol,
    SamplerProtocol,
)
from ._seed import get_rng_state, make_seed, set_rng_state, set_seed
from ._sync_rl import SyncRl, SyncRlEval, SyncRlMixin, find_port

__version__ = version("rl-runners")

__all__ = [
    "CHECKPOINT_FORMAT",
    "SNAPSHOT_MODES",
    "AgentProtocol",
    "AlgoProtocol",
    "AsyncAgentProtocol",
    "AsyncAlgoProtocol",
    "AsyncRl",
    "AsyncRlBase",
    "AsyncRlEval",
    "AsyncSamplerProtocol",
    "DeployedPolicy",
    "InferenceAgentProtocol",
    "Logger",
    "MinibatchRl",
    "MinibatchRlBase",
    "MinibatchRlEval",
    "OnPolicyRunner",
    "ProgBarCounter",
    "SamplerProtocol",
    "SyncRl",
    "SyncRlEval",
    "SyncRlMixin",
    "atomic_write",
    "companion_path",
    "find_checkpoint",
    "find_port",
    "get_rng_state",
    "load_checkpoint",
    "logger",
    "logger_context",
    "make_seed",
    "set_rng_state",
    "set_seed",
]
