"""rl-samplers: environments (gymnasium, Atari), trajectory info, collectors and samplers."""

from importlib.metadata import version as _version

from ._agent import SamplerAgent
from ._base import BaseSampler
from ._collectors import (
    BaseCollector,
    CpuResetCollector,
    CpuWaitResetCollector,
    DecorrelatingStartCollector,
    SerialEvalCollector,
)
from ._env import Env
from ._parallel import CpuSampler, ParallelSamplerBase
from ._serial import SerialSampler
from ._spaces import Composite, FloatBox, IntBox, Space
from ._traj_info import TrajInfo

__version__ = _version("rl-samplers")

__all__ = [
    "BaseCollector",
    "BaseSampler",
    "Composite",
    "CpuResetCollector",
    "CpuSampler",
    "CpuWaitResetCollector",
    "DecorrelatingStartCollector",
    "Env",
    "FloatBox",
    "IntBox",
    "ParallelSamplerBase",
    "SamplerAgent",
    "SerialEvalCollector",
    "SerialSampler",
    "Space",
    "TrajInfo",
]
