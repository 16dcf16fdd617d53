"""rl-samplers: environments (gymnasium, Atari), trajectory info, collectors and samplers."""

from importlib.metadata import version as _version

from ._agent import AsyncSamplerAgent, SamplerAgent
from ._ale_vector import AleVectorEnv
from ._async import (
    AsyncAlternatingSampler,
    AsyncCpuSampler,
    AsyncGpuSampler,
    AsyncNoOverlapAlternatingSampler,
    AsyncSampler,
    AsyncSerialSampler,
    DbCpuResetCollector,
    DbCpuWaitResetCollector,
    DbGpuResetCollector,
    DbGpuWaitResetCollector,
)
from ._atari import AtariEnv, AtariTrajInfo
from ._base import BaseSampler
from ._batched import (
    CRITIC_OBSERVATION,
    TRAJ_DONE,
    ActorCriticObservation,
    BatchedSampler,
    BatchEnv,
    BatchTrajInfos,
)
from ._collectors import (
    BaseCollector,
    CpuResetCollector,
    CpuWaitResetCollector,
    DecorrelatingStartCollector,
    SerialEvalCollector,
)
from ._env import Env
from ._env_checker import EnvCheckError, check_env
from ._env_state import UnsavedState, load_state, state_of
from ._gpu import GpuEvalCollector, GpuResetCollector, GpuWaitResetCollector
from ._gym import EnvInfoWrapper, GymEnvWrapper, GymSpaceWrapper, InfoActionMask, make
from ._parallel import (
    AlternatingSampler,
    CpuSampler,
    GpuSampler,
    NoOverlapAlternatingSampler,
    ParallelSampler,
    ParallelSamplerBase,
)
from ._rsl_rl import RslRlVecEnvAdapter
from ._serial import SerialSampler
from ._spaces import Composite, FloatBox, IntBox, Space
from ._torch_envs import TorchCartPole, TorchPendulum
from ._traj_info import TrajInfo
from ._worker import WorkerError, WorkerTimeout

__version__ = _version("rl-samplers")

__all__ = [
    "CRITIC_OBSERVATION",
    "TRAJ_DONE",
    "ActorCriticObservation",
    "AleVectorEnv",
    "AlternatingSampler",
    "AsyncAlternatingSampler",
    "AsyncCpuSampler",
    "AsyncGpuSampler",
    "AsyncNoOverlapAlternatingSampler",
    "AsyncSampler",
    "AsyncSamplerAgent",
    "AsyncSerialSampler",
    "AtariEnv",
    "AtariTrajInfo",
    "BaseCollector",
    "BaseSampler",
    "BatchEnv",
    "BatchTrajInfos",
    "BatchedSampler",
    "Composite",
    "CpuResetCollector",
    "CpuSampler",
    "CpuWaitResetCollector",
    "DbCpuResetCollector",
    "DbCpuWaitResetCollector",
    "DbGpuResetCollector",
    "DbGpuWaitResetCollector",
    "DecorrelatingStartCollector",
    "Env",
    "EnvCheckError",
    "EnvInfoWrapper",
    "FloatBox",
    "GpuEvalCollector",
    "GpuResetCollector",
    "GpuSampler",
    "GpuWaitResetCollector",
    "GymEnvWrapper",
    "GymSpaceWrapper",
    "InfoActionMask",
    "IntBox",
    "NoOverlapAlternatingSampler",
    "ParallelSampler",
    "ParallelSamplerBase",
    "RslRlVecEnvAdapter",
    "SamplerAgent",
    "SerialEvalCollector",
    "SerialSampler",
    "Space",
    "TorchCartPole",
    "TorchPendulum",
    "TrajInfo",
    "UnsavedState",
    "WorkerError",
    "WorkerTimeout",
    "check_env",
    "load_state",
    "make",
    "state_of",
]
