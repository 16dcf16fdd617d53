"""What a configuration asks for (see ``_config``): the algorithm, agent, sampler and
collector classes by name, the agent a run's spaces call for, and the objects made from them,
each construction error reworded to name the setting at fault."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from rl_agents import (
    AsymmetricCategoricalPgAgent,
    AsymmetricGaussianPgAgent,
    AsymmetricRecurrentCategoricalPgAgent,
    AsymmetricRecurrentGaussianPgAgent,
    AtariCatDqnAgent,
    AtariDqnAgent,
    AtariFfAgent,
    AtariLstmAgent,
    AtariR2d1Agent,
    CategoricalFfAgent,
    CategoricalLstmAgent,
    DdpgAgent,
    DictCategoricalFfAgent,
    DictDqnAgent,
    DictGaussianFfAgent,
    MujocoFfAgent,
    MujocoLstmAgent,
    SacAgent,
    Td3Agent,
    VectorCatDqnAgent,
    VectorDqnAgent,
    VectorR2d1Agent,
    model_env_spaces,
)
from rl_algos import A2C, DDPG, DQN, PPO, R2D1, SAC, TD3, CategoricalDQN
from rl_arrays import check_memory
from rl_samplers import (
    AlternatingSampler,
    AsyncAlternatingSampler,
    AsyncCpuSampler,
    AsyncGpuSampler,
    AsyncSerialSampler,
    CpuResetCollector,
    CpuSampler,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    SerialSampler,
)

from ._config import ALGOS
from ._envs import (
    make_env,
)

__all__ = [
    "ACTION_KINDS",
    "ALGO_CLASSES",
    "ASYNC_SAMPLER_CLASSES",
    "COLLECTORS",
    "ON_POLICY",
    "QPG_AGENTS",
    "Q_AGENTS",
    "SAMPLER_CLASSES",
    "agent_class",
    "check_replay_memory",
    "construct",
    "env_kwargs",
    "make_agent",
    "probe_spaces",
]


ALGO_CLASSES = {
    "a2c": A2C,
    "ppo": PPO,
    "dqn": DQN,
    "catdqn": CategoricalDQN,
    "r2d1": R2D1,
    "ddpg": DDPG,
    "td3": TD3,
    "sac": SAC,
}
# The Q-learning agents, by algorithm: (for image observations, for vector observations).
Q_AGENTS = {
    "dqn": (AtariDqnAgent, VectorDqnAgent),
    "catdqn": (AtariCatDqnAgent, VectorCatDqnAgent),
    "r2d1": (AtariR2d1Agent, VectorR2d1Agent),
}
# The Q-value policy-gradient agents (vector observations, continuous actions; evaluation
# always deterministic).
QPG_AGENTS = {"ddpg": DdpgAgent, "td3": Td3Agent, "sac": SacAgent}
SAMPLER_CLASSES = {
    "serial": SerialSampler,
    "cpu": CpuSampler,
    "gpu": GpuSampler,
    "alternating": AlternatingSampler,
}
ASYNC_SAMPLER_CLASSES = {
    "serial": AsyncSerialSampler,
    "cpu": AsyncCpuSampler,
    "gpu": AsyncGpuSampler,
    "alternating": AsyncAlternatingSampler,
}
# (sampler kind, mid_batch_reset) -> collector
COLLECTORS = {
    ("serial", True): CpuResetCollector,
    ("serial", False): CpuWaitResetCollector,
    ("cpu", True): CpuResetCollector,
    ("cpu", False): CpuWaitResetCollector,
    ("gpu", True): GpuResetCollector,
    ("gpu", False): GpuWaitResetCollector,
    ("alternating", True): GpuResetCollector,
    ("alternating", False): GpuWaitResetCollector,
}
# The action spaces each algorithm can act in.
ACTION_KINDS = {
    "a2c": {"discrete", "continuous"},
    "ppo": {"discrete", "continuous"},
    **{algo: {"discrete"} for algo in Q_AGENTS},
    **{algo: {"continuous"} for algo in QPG_AGENTS},
}
ON_POLICY = ("a2c", "ppo")  # the algorithms batched environments train
assert set(ALGO_CLASSES) == set(ALGOS) == set(ACTION_KINDS)


def _action_kind(space: Any) -> str | None:
    if isinstance(getattr(space, "n", None), int):
        return "discrete"
    shape = getattr(space, "shape", None)
    return "continuous" if shape is not None and len(shape) == 1 else None


def env_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    return {"id": config["env"], **config["env_kwargs"]}


def probe_spaces(config: dict[str, Any]) -> Any:
    """The environment's spaces, from one instance made (and closed) here: an unknown id or
    bad env_kwargs fail now, with the id named."""
    try:
        env = make_env(**env_kwargs(config))
    except Exception as error:  # gymnasium raises its own error types for unknown ids
        raise ValueError(f"cannot make environment {config['env']!r}: {error}") from error
    try:
        return env.spaces
    finally:
        env.close()


def agent_class(config: dict[str, Any], spaces: Any) -> type:
    """The agent for the observation (image or vector) and action (discrete or continuous)
    spaces, recurrent when ``agent.recurrent``; a clear error when the algorithm cannot act
    in the action space."""
    algo, recurrent = config["algo"], config["agent"]["recurrent"]
    kind = _action_kind(spaces.action)
    if kind not in ACTION_KINDS[algo]:
        raise ValueError(
            f"{algo} cannot act in {config['env']}'s action space {spaces.action}; it takes "
            f"{' or '.join(sorted(ACTION_KINDS[algo]))} actions"
        )
    if hasattr(spaces.observation.shape, "critic"):  # privileged critic observations
        if algo not in ON_POLICY:
            raise ValueError(f"{algo} has no agent with a critic observation (ppo and a2c do)")
        if config["algo_kwargs"].get("clip_grad_separately"):  # (asymmetric models can't)
            raise ValueError(
                "algo_kwargs.clip_grad_separately: the agents with a critic observation clip "
                "the policy's and the value's gradients together; set it to False"
            )
        if kind == "continuous":
            return AsymmetricRecurrentGaussianPgAgent if recurrent else AsymmetricGaussianPgAgent
        return AsymmetricRecurrentCategoricalPgAgent if recurrent else AsymmetricCategoricalPgAgent
    model_spaces = model_env_spaces(spaces)  # (without an action mask)
    if model_spaces is not spaces and algo not in ("dqn", *ON_POLICY):
        raise ValueError(
            f"{config['env']}'s observations carry an action mask: ppo, a2c and dqn mask "
            f"actions, {algo} does not"
        )
    if hasattr(model_spaces.observation, "names"):  # a Dict observation of several fields
        return _dict_agent_class(config, kind)
    ndim = len(model_spaces.observation.shape)
    if algo in QPG_AGENTS:
        if ndim != 1 or recurrent:
            raise ValueError(
                f"{algo}'s agent takes vector observations and is not recurrent; got "
                f"{config['env']}'s observations of shape {spaces.observation.shape}, "
                f"agent.recurrent={recurrent}"
            )
        return QPG_AGENTS[algo]
    if algo in Q_AGENTS and ndim in (1, 3):
        return Q_AGENTS[algo][ndim == 1]
    if ndim == 3 and kind == "discrete":
        return AtariLstmAgent if recurrent else AtariFfAgent
    if ndim == 1 and kind == "discrete":
        return CategoricalLstmAgent if recurrent else CategoricalFfAgent
    if ndim == 1 and kind == "continuous":
        return MujocoLstmAgent if recurrent else MujocoFfAgent
    raise ValueError(
        f"no agent for {config['env']}: observations of shape {model_spaces.observation.shape} with "
        f"{kind} actions (the trainer has agents for vector or [C, H, W] image observations)"
    )


def _dict_agent_class(config: dict[str, Any], kind: str | None) -> type:
    """The agent of a ``Dict`` observation: one encoder per field (``DictFfModel``)."""
    algo = config["algo"]
    if config["agent"]["recurrent"] or algo not in ("dqn", *ON_POLICY):
        raise ValueError(
            f"{config['env']} gives Dict observations: ppo, a2c and dqn have feed-forward "
            f"agents for them; {algo} with agent.recurrent={config['agent']['recurrent']} has none"
        )
    if config["algo_kwargs"].get("clip_grad_separately"):
        raise ValueError(
            "algo_kwargs.clip_grad_separately: the Dict agents clip the policy's and the "
            "value's gradients together; set it to False"
        )
    if algo == "dqn":
        return DictDqnAgent
    return DictGaussianFfAgent if kind == "continuous" else DictCategoricalFfAgent


def make_agent(config: dict[str, Any], spaces: Any, deterministic_eval: bool) -> Any:
    """The agent for ``config``, not yet initialized; ``deterministic_eval``: greedy actions
    in eval mode (for a Q-learning agent, an evaluation epsilon of 0; DDPG, TD3 and SAC
    agents always evaluate deterministically)."""
    AgentCls = agent_class(config, spaces)
    model_kwargs = dict(config["agent"]["model_kwargs"])
    for key in ("hidden_nonlinearity", "mu_nonlinearity"):  # by name in a config: "ELU"
        if isinstance(model_kwargs.get(key), str):
            module = getattr(torch.nn, model_kwargs[key], None)
            if not (isinstance(module, type) and issubclass(module, torch.nn.Module)):
                raise ValueError(
                    f"agent.model_kwargs.{key} must name a torch.nn activation (e.g. 'ELU', "
                    f"'Tanh', 'ReLU'), got {model_kwargs[key]!r}"
                )
            model_kwargs[key] = module
    kwargs = dict(config["agent_kwargs"], model_kwargs=model_kwargs)
    if config["algo"] in Q_AGENTS:
        if deterministic_eval:
            kwargs["eps_eval"] = 0.0
    elif config["algo"] not in QPG_AGENTS:
        kwargs["deterministic_eval"] = deterministic_eval
    agent = construct(AgentCls, "agent settings", kwargs)
    _check_model(agent, spaces)
    return agent


def _check_model(agent: Any, spaces: Any) -> None:
    """Build the agent's model once (torch's random state kept): a model setting it refuses
    fails here, named, not once the sampler has started."""
    env_kwargs = agent.make_env_to_model_kwargs(model_env_spaces(spaces))
    try:
        with torch.random.fork_rng(devices=[]):
            agent.ModelCls(**env_kwargs, **agent.model_kwargs)
    except TypeError as error:  # (mostly a keyword it does not take: say which it takes)
        takes = [k for k in inspect.signature(agent.ModelCls).parameters if k not in env_kwargs]
        raise ValueError(f"agent.model_kwargs: {error} (it takes {', '.join(takes)})") from error
    except ValueError as error:
        raise ValueError(f"agent.model_kwargs: {error}") from error


def check_replay_memory(algo: Any, spaces: Any) -> None:
    """Refuse a replay buffer far beyond the memory now, not once sampling has started: each
    step holds at least an action and an observation (of an image, one frame: frame buffers
    store each once). The buffer checks its exact size when it is made."""
    size = getattr(algo, "replay_size", None)
    if size is None or getattr(algo, "replay_device", None) is not None:
        return
    observation, action = spaces.observation.null_value(), spaces.action.null_value()
    if hasattr(observation, "_fields"):  # a Dict observation: all its fields
        observation_bytes = sum(np.asarray(field).nbytes for field in observation)
    else:
        observation_bytes = (observation[0] if observation.ndim == 3 else observation).nbytes
    hint = "counting its observations and actions alone"
    check_memory("algo_kwargs.replay_size", size, observation_bytes + action.nbytes, hint)


def construct(cls: type, what: str, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)`` with an unknown keyword reported as the setting it came from."""
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"{what}: {error}") from error
