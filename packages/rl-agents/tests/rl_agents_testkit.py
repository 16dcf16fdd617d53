"""Small fake spaces and agent configurations for the rl-agents tests (no environments)."""

from __future__ import annotations

import torch

import rl_agents as ra
from rl_arrays import EnvSpaces


class Discrete:
    """Stands in for an IntBox-like space: actions in range(n)."""

    def __init__(self, n: int):
        self.n = n


class Box:
    """Stands in for a FloatBox-like space."""

    def __init__(self, shape: tuple[int, ...], low: float = -1.0, high: float = 1.0):
        self.shape = shape
        self.low = torch.full(shape, low)
        self.high = torch.full(shape, high)


IMAGE_SHAPE = (2, 24, 24)
N_ACTIONS = 3
OBS_SHAPE = (5,)
ACTION_SIZE = 2
LSTM_SIZE = 8

ATARI_SPACES = EnvSpaces(observation=Box(IMAGE_SHAPE, 0, 255), action=Discrete(N_ACTIONS))
MUJOCO_SPACES = EnvSpaces(observation=Box(OBS_SHAPE), action=Box((ACTION_SIZE,)))
VECTOR_DISCRETE_SPACES = EnvSpaces(observation=Box(OBS_SHAPE), action=Discrete(N_ACTIONS))

ATARI_FF_KWARGS = dict(fc_sizes=16, channels=[4, 8])
ATARI_LSTM_KWARGS = dict(fc_sizes=16, channels=[4, 8], lstm_size=LSTM_SIZE)
MUJOCO_FF_KWARGS = dict(hidden_sizes=[16])
MUJOCO_LSTM_KWARGS = dict(hidden_sizes=[16], lstm_size=LSTM_SIZE)
VECTOR_FF_KWARGS = dict(hidden_sizes=[16])
VECTOR_LSTM_KWARGS = dict(hidden_sizes=[16], lstm_size=LSTM_SIZE)

# (agent class, spaces, small model kwargs)
FF_AGENTS = [
    (ra.AtariFfAgent, ATARI_SPACES, ATARI_FF_KWARGS),
    (ra.MujocoFfAgent, MUJOCO_SPACES, MUJOCO_FF_KWARGS),
    (ra.CategoricalFfAgent, VECTOR_DISCRETE_SPACES, VECTOR_FF_KWARGS),
]
RECURRENT_AGENTS = [
    (ra.AtariLstmAgent, ATARI_SPACES, ATARI_LSTM_KWARGS),
    (ra.MujocoLstmAgent, MUJOCO_SPACES, MUJOCO_LSTM_KWARGS),
    (ra.CategoricalLstmAgent, VECTOR_DISCRETE_SPACES, VECTOR_LSTM_KWARGS),
]
ALTERNATING_AGENTS = [
    (ra.AlternatingAtariLstmAgent, ATARI_SPACES, ATARI_LSTM_KWARGS),
    (ra.AlternatingMujocoLstmAgent, MUJOCO_SPACES, MUJOCO_LSTM_KWARGS),
]
ALL_AGENTS = FF_AGENTS + RECURRENT_AGENTS + ALTERNATING_AGENTS


def is_discrete(spaces: EnvSpaces) -> bool:
    return hasattr(spaces.action, "n")


def make_agent(cls, spaces, model_kwargs, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    agent = cls(model_kwargs=model_kwargs, **kwargs)
    agent.initialize(spaces)
    return agent


def agent_inputs(spaces: EnvSpaces, lead: tuple[int, ...], seed: int = 1):
    """Random (observation, prev_action, prev_reward) with leading dims ``lead``."""
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(spaces.observation.shape)
    if len(shape) == 3:  # images
        observation = torch.randint(0, 256, lead + shape, generator=gen).to(torch.uint8)
    else:
        observation = torch.randn(lead + shape, generator=gen)
    if is_discrete(spaces):
        prev_action = torch.randint(0, spaces.action.n, lead, generator=gen)
    else:
        prev_action = torch.randn(lead + tuple(spaces.action.shape), generator=gen)
    prev_reward = torch.randn(lead, generator=gen)
    return observation, prev_action, prev_reward
