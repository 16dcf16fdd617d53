"""The ``[T, B]`` sample buffer a sampler fills, allocated from one real step."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_arrays import (
    AgentInputs,
    AgentSamples,
    AgentSamplesBsv,
    BatchSpec,
    EnvSamples,
    Samples,
    buffer_from_example,
    check_memory,
    numpify_buffer,
    torchify_buffer,
)

from ._agent import SamplerAgent
from ._env import Env
from ._spaces import sample_action

__all__ = ["build_samples_buffer", "get_example_outputs"]


def get_example_outputs(agent: SamplerAgent, env: Env) -> dict[str, Any]:
    """One step of ``env`` and ``agent``, to learn every field's shape and dtype."""
    observation = env.reset()
    action = env.action_space.null_value()
    step = env.step(sample_action(env.action_space, observation))
    reward = np.asarray(step.reward, np.float32)
    agent.reset()
    inputs = torchify_buffer(AgentInputs(observation, action, reward))
    with torch.no_grad():
        agent_step = agent.step(*inputs)
    return dict(
        observation=observation,
        reward=reward,
        done=np.bool_(step.done),
        env_info=step.env_info,
        action=np.asarray(action),
        agent_info=_numpy_example(agent_step.agent_info),
    )


def _numpy_example(agent_info: Any) -> Any:
    if agent_info is None or (isinstance(agent_info, tuple) and not agent_info):
        return None
    return numpify_buffer(agent_info)


def _leaves(example: Any) -> list[Any]:
    if example is None:
        return []
    if isinstance(example, tuple):
        return [leaf for item in example for leaf in _leaves(item)]
    return [example]


def build_samples_buffer(
    examples: dict[str, Any], batch_spec: BatchSpec, bootstrap_value: bool, shared: bool
) -> tuple[Any, Any]:
    """``(samples_pyt, samples_np)``: one ``Samples`` buffer seen as torch and as numpy."""
    T, B = batch_spec
    step = sum(  # (action and reward twice: the previous ones too)
        np.asarray(leaf).nbytes * (2 if key in ("action", "reward") else 1)
        for key in ("observation", "action", "reward", "done", "agent_info", "env_info")
        for leaf in _leaves(examples[key])
    )
    check_memory("batch_T*batch_B", T * B, step)
    agent_fields = dict(
        action=buffer_from_example(examples["action"], (T, B), shared),
        prev_action=buffer_from_example(examples["action"], (T, B), shared),
        agent_info=buffer_from_example(examples["agent_info"], (T, B), shared),
    )
    if bootstrap_value:
        agent = AgentSamplesBsv(
            **agent_fields, bootstrap_value=buffer_from_example(np.float32(0), (B,), shared)
        )
    else:
        agent = AgentSamples(**agent_fields)
    env = EnvSamples(
        observation=buffer_from_example(examples["observation"], (T, B), shared),
        reward=buffer_from_example(examples["reward"], (T, B), shared),
        prev_reward=buffer_from_example(examples["reward"], (T, B), shared),
        done=buffer_from_example(examples["done"], (T, B), shared),
        env_info=buffer_from_example(examples["env_info"], (T, B), shared),
    )
    samples_np = Samples(agent=agent, env=env)
    return torchify_buffer(samples_np), samples_np
