"""Training runners, the logger, checkpoints and exact resume.

``MinibatchRl`` is the one training loop (``sampler.obtain_samples``, ``algo.optimize_agent``,
a row and snapshot per log interval), given its parts: an ``Evaluator`` (``MinibatchRlEval``
is the loop with one), a ``Checkpointer`` (snapshots that ``resume`` continues exactly) and
the processes it runs in (``SyncRl``: a ``ProcessGroup``).  Rows go through ``logger``
(rlpyt's logger calls) into the run directory that ``logger_context`` sets up.
``OnPolicyRunner`` offers rsl_rl's calls (``learn``, ``save``, ``load``,
``get_inference_policy``) on the same loop.
"""

from importlib.metadata import version

from ._async_rl import AsyncRl, AsyncRlBase, AsyncRlEval
from ._checkpoint import (
    atomic_write,
    companion_path,
    find_checkpoint,
    load_checkpoint,
    load_data,
    remove_partial_writes,
    save_data,
)
from ._checkpointer import CHECKPOINT_FORMAT, Checkpointer, read_checkpoint
from ._console import ProgBarCounter
from ._evaluator import Evaluator
from ._group import ProcessGroup, SingleProcess
from ._guard import FiniteGuard, NonFiniteError
from ._logger import SNAPSHOT_MODES, Logger, logger, logger_context
from ._minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from ._modes import AgentModes
from ._on_policy import DeployedPolicy, OnPolicyRunner
from ._outputs import LOG_OUTPUTS, MlflowOutput, RowOutput, WandbOutput, mlflow_key
from ._progress import Progress, TrajWindow
from ._protocols import (
    AgentProtocol,
    AlgoProtocol,
    AsyncAgentProtocol,
    AsyncAlgoProtocol,
    AsyncSamplerProtocol,
    InferenceAgentProtocol,
    SamplerProtocol,
)
from ._run_lock import RunDirInUse
from ._seed import get_rng_state, make_seed, seed_after, set_rng_state, set_seed
from ._sync_rl import SyncRl, SyncRlEval, SyncRlMixin, find_port

__version__ = version("rl-runners")

__all__ = [
    "CHECKPOINT_FORMAT",
    "LOG_OUTPUTS",
    "SNAPSHOT_MODES",
    "AgentModes",
    "AgentProtocol",
    "AlgoProtocol",
    "AsyncAgentProtocol",
    "AsyncAlgoProtocol",
    "AsyncRl",
    "AsyncRlBase",
    "AsyncRlEval",
    "AsyncSamplerProtocol",
    "Checkpointer",
    "DeployedPolicy",
    "Evaluator",
    "FiniteGuard",
    "InferenceAgentProtocol",
    "Logger",
    "MinibatchRl",
    "MinibatchRlBase",
    "MinibatchRlEval",
    "MlflowOutput",
    "NonFiniteError",
    "OnPolicyRunner",
    "ProcessGroup",
    "ProgBarCounter",
    "Progress",
    "RowOutput",
    "RunDirInUse",
    "SamplerProtocol",
    "SingleProcess",
    "SyncRl",
    "SyncRlEval",
    "SyncRlMixin",
    "TrajWindow",
    "WandbOutput",
    "atomic_write",
    "companion_path",
    "find_checkpoint",
    "find_port",
    "get_rng_state",
    "load_checkpoint",
    "load_data",
    "logger",
    "logger_context",
    "make_seed",
    "mlflow_key",
    "read_checkpoint",
    "remove_partial_writes",
    "save_data",
    "seed_after",
    "set_rng_state",
    "set_seed",
]
