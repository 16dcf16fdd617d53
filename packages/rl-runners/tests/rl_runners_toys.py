"""Small sampler, agent and algorithm for the runner tests (no rl_samplers / rl_agents /
rl_algos): deterministic given their seeds, with real torch parameters and SGD steps."""

from __future__ import annotations

import random
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

OBS_DIM = 3
OptInfo = namedtuple("OptInfo", ["loss", "gradNorm"])


class ToyTrajInfo:
    """Attribute-style trajectory info, with a private field that must not be logged."""

    def __init__(self, Length: int, Return: float):
        self.Length = Length
        self.Return = Return
        self.DiscountedReturn = Return * 0.5
        self._private = 123.0


class WaitResetCollector:
    mid_batch_reset = False


class StatelessToySampler:
    """``batch_T x batch_B`` random observations and rewards from a seeded numpy generator;
    env ``b`` ends an episode every ``3 + b`` steps.  ``script`` maps an iteration to the
    trajectory infos to return instead; ``fail_at`` raises ``fail_with`` in that iteration."""

    def __init__(
        self,
        batch_T: int = 4,
        batch_B: int = 2,
        script: dict[int, list[Any]] | None = None,
        eval_script: list[Any] | None = None,
        fail_at: int | None = None,
        fail_with: type[BaseException] = RuntimeError,
        CollectorCls: Any = None,
    ):
        self.batch_spec = SimpleNamespace(T=batch_T, B=batch_B, size=batch_T * batch_B)
        self.script, self.eval_script = script, eval_script
        self.fail_at, self.fail_with = fail_at, fail_with
        if CollectorCls is not None:
            self.CollectorCls = CollectorCls
        self.calls: list[Any] = []

    @property
    def batch_size(self) -> int:
        return self.batch_spec.size

    def initialize(
        self,
        agent,
        affinity=None,
        seed=None,
        bootstrap_value=False,
        traj_info_kwargs=None,
        rank=0,
        world_size=1,
    ):
        self.calls.append(
            (
                "initialize",
                dict(
                    seed=seed,
                    bootstrap_value=bootstrap_value,
                    traj_info_kwargs=traj_info_kwargs,
                    rank=rank,
                    world_size=world_size,
                    affinity=affinity,
                ),
            )
        )
        self.rng = np.random.default_rng(seed)
        self.eval_rng = np.random.default_rng([seed, 1])
        self.steps = [0] * self.batch_spec.B
        self.returns = [0.0] * self.batch_spec.B
        self.agent = agent
        return {"example": "examples"}

    def obtain_samples(self, itr: int):
        self.calls.append(("obtain_samples", itr))
        if itr == self.fail_at:
            raise self.fail_with(f"sampler failed at {itr}")
        T, B = self.batch_spec.T, self.batch_spec.B
        obs = torch.as_tensor(self.rng.normal(size=(T, B, OBS_DIM)), dtype=torch.float32)
        reward = torch.as_tensor(self.rng.normal(size=(T, B)), dtype=torch.float32)
        traj_infos = []
        for t in range(T):
            for b in range(B):
                self.steps[b] += 1
                self.returns[b] += float(reward[t, b])
                if self.steps[b] == 3 + b:
                    traj_infos.append(ToyTrajInfo(self.steps[b], self.returns[b]))
                    self.steps[b], self.returns[b] = 0, 0.0
        if self.script is not None:
            traj_infos = list(self.script.get(itr, []))
        return SimpleNamespace(observation=obs, reward=reward), traj_infos

    def evaluate_agent(self, itr: int):
        self.calls.append(("evaluate_agent", itr))
        if self.eval_script is not None:
            return list(self.eval_script)
        return [ToyTrajInfo(5, float(self.eval_rng.normal())) for _ in range(2)]

    def shutdown(self):
        self.calls.append(("shutdown",))


class ToySampler(StatelessToySampler):
    """``StatelessToySampler`` with ``state_dict`` / ``load_state_dict``."""

    def state_dict(self):
        return dict(
            rng=self.rng.bit_generator.state,
            eval_rng=self.eval_rng.bit_generator.state,
            steps=list(self.steps),
            returns=list(self.returns),
        )

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]
        self.eval_rng.bit_generator.state = state["eval_rng"]
        self.steps, self.returns = list(state["steps"]), list(state["returns"])


class ToyAgent:
    """A linear model; records the mode calls."""

    def __init__(self):
        self.model = torch.nn.Linear(OBS_DIM, 1)
        self.calls: list[Any] = []

    def to_device(self, cuda_idx=None):
        self.calls.append(("to_device", cuda_idx))

    def sample_mode(self, itr):
        self.calls.append(("sample_mode", itr))

    def train_mode(self, itr):
        self.calls.append(("train_mode", itr))

    def eval_mode(self, itr):
        self.calls.append(("eval_mode", itr))

    def parameters(self):
        return self.model.parameters()

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, state_dict):
        return self.model.load_state_dict(state_dict)


class ToyAlgo:
    """Regresses the reward on the observation: two SGD-with-momentum steps per batch on
    minibatches drawn by ``torch.randperm``, each loss scaled by factors drawn from python's
    and numpy's global generators (so every generator's state matters when resuming)."""

    bootstrap_value = True
    opt_info_fields = OptInfo._fields

    def __init__(self, lr: float = 0.05, discount: float = 0.99, count_updates: bool = True):
        self.lr, self.discount = lr, discount
        if count_updates:
            self.update_counter = 0
        self.init_kwargs: dict[str, Any] | None = None
        self.optimize_calls: list[int] = []

    def initialize(
        self, agent, n_itr, batch_spec, mid_batch_reset=False, examples=None, world_size=1, rank=0
    ):
        self.init_kwargs = dict(
            n_itr=n_itr,
            batch_spec=batch_spec,
            mid_batch_reset=mid_batch_reset,
            examples=examples,
            world_size=world_size,
            rank=rank,
        )
        self.agent = agent
        self.optimizer = torch.optim.SGD(agent.parameters(), lr=self.lr, momentum=0.9)

    def optimize_agent(self, itr, samples):
        self.optimize_calls.append(itr)
        obs = samples.observation.reshape(-1, OBS_DIM)
        target = samples.reward.reshape(-1)
        perm = torch.randperm(len(target))
        info = OptInfo([], [])
        for idx in perm.chunk(2):
            scale = 1.0 + 0.1 * random.random() + 0.1 * float(np.random.rand())
            self.optimizer.zero_grad()
            loss = scale * ((self.agent.model(obs[idx]).squeeze(-1) - target[idx]) ** 2).mean()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(), 1e6)
            self.optimizer.step()
            info.loss.append(loss.item())
            info.gradNorm.append(float(grad_norm))
            if hasattr(self, "update_counter"):
                self.update_counter += 1
        return info

    def optim_state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_optim_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])


def make(sampler_kwargs=None, algo_kwargs=None, sampler_cls=ToySampler):
    """A fresh (algo, agent, sampler), the agent's initial weights drawn from a fixed seed."""
    torch.manual_seed(0)
    return ToyAlgo(**(algo_kwargs or {})), ToyAgent(), sampler_cls(**(sampler_kwargs or {}))
