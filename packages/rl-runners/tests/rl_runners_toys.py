"""Small sampler, agent and algorithm for the runner tests (no rl_samplers / rl_agents /
rl_algos): deterministic given their seeds, with real torch parameters and SGD steps."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rl_arrays import np_mp_array
from rl_runners import SyncRl

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
    trajectory infos to return instead; ``fail_at`` raises ``fail_with`` in that iteration;
    ``signal_at`` sends this process ``stop_signal`` in that iteration; rewards are NaN from
    iteration ``nan_at`` on."""

    def __init__(
        self,
        batch_T: int = 4,
        batch_B: int = 2,
        script: dict[int, list[Any]] | None = None,
        eval_script: list[Any] | None = None,
        fail_at: int | None = None,
        fail_with: type[BaseException] = RuntimeError,
        CollectorCls: Any = None,
        signal_at: int | None = None,
        stop_signal: int = signal.SIGTERM,
        nan_at: int | None = None,
    ):
        self.batch_spec = SimpleNamespace(T=batch_T, B=batch_B, size=batch_T * batch_B)
        self.script, self.eval_script = script, eval_script
        self.fail_at, self.fail_with = fail_at, fail_with
        self.signal_at, self.stop_signal, self.nan_at = signal_at, stop_signal, nan_at
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
        if itr == self.signal_at:
            os.kill(os.getpid(), self.stop_signal)
        T, B = self.batch_spec.T, self.batch_spec.B
        obs = torch.as_tensor(self.rng.normal(size=(T, B, OBS_DIM)), dtype=torch.float32)
        reward = torch.as_tensor(self.rng.normal(size=(T, B)), dtype=torch.float32)
        if self.nan_at is not None and itr >= self.nan_at:
            reward[:] = float("nan")
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


# ------------------------------------------------------------------ asynchronous toys
# For AsyncRl: the sampler and the memory copier run in processes of their own, so what the
# tests check on that side is kept on shared memory. Module-level classes: they pickle
# under spawn.

ToySamples = namedtuple("ToySamples", ["observation", "reward", "batch"])
TRUE_WEIGHT = np.array([1.0, -2.0, 0.5], np.float32)
# Slots of ToyAsyncSampler.record
INITIALIZED, SHUT_DOWN, BATCHES, EVALUATIONS, RECEIVED, AFFINITY_MARK = range(6)


class PipeLock:
    """A lock between processes over a pipe (a byte is its token), as rl-agents' and
    rl-replay's locks have no name in /dev/shm: a kill -9 of the whole group leaves nothing."""

    def __init__(self):
        self._out, self._in = mp.Pipe(duplex=False)
        self.release()

    def acquire(self):
        os.read(self._out.fileno(), 1)

    def release(self):
        os.write(self._in.fileno(), b"\1")

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()


class ToyAsyncAgent(ToyAgent):
    """``ToyAgent`` with the asynchronous calls: its model goes on shared memory
    (``initialize_shared``) and the training process trains it in place, counting the
    updates it publishes (``send_shared_memory``, under ``lock`` as rl-agents does); the
    sampler's process acts with a model of its own (``async_cpu``) that
    ``recv_shared_memory`` refreshes."""

    def initialize_shared(self):
        self.model.share_memory()
        self.shared_model = self.model
        self.sent = torch.zeros((), dtype=torch.int64).share_memory_()
        self.lock = PipeLock()
        self.received = 0

    def async_cpu(self):
        self.model = torch.nn.Linear(OBS_DIM, 1)
        self.recv_shared_memory(force=True)

    def send_shared_memory(self):
        with self.lock:
            self.sent += 1

    def recv_shared_memory(self, force=False):
        if force or int(self.sent) != self.received:
            with self.lock:
                self.model.load_state_dict(self.shared_model.state_dict())
                self.received = int(self.sent)


class ToyWorkerError(ChildProcessError):
    """What rl-samplers' WorkerError is: a sampler worker died (one line)."""


class ToyAsyncSampler:
    """Writes batch ``itr`` into half ``db_idx`` of its double buffer: random observations,
    rewards ``observation @ TRUE_WEIGHT`` and ``batch`` = ``itr`` everywhere (so the replay
    tells batches apart and sees a half overwritten while copied); one trajectory per batch,
    of return ``itr``. An evaluation at ``itr`` gives returns ``itr`` and ``itr + 1``.

    ``delay``: seconds per batch. ``fail_at``: raise in that iteration; ``die_at``: end the
    process there without a word; ``die_holding_lock_at``: the same while holding the
    agent's lock (which the training process then waits for); ``worker_dies_at``: raise a
    ``ToyWorkerError`` there. ``record`` (shared memory):
    what happened in the sampler's process (see the slot names above).
    """

    def __init__(
        self,
        batch_T=4,
        batch_B=2,
        delay=0.0,
        fail_at=None,
        die_at=None,
        die_holding_lock_at=None,
        worker_dies_at=None,
        eval_n_envs=2,
    ):
        self.batch_spec = SimpleNamespace(T=batch_T, B=batch_B, size=batch_T * batch_B)
        self.delay, self.fail_at, self.die_at = delay, fail_at, die_at
        self.die_holding_lock_at, self.worker_dies_at = die_holding_lock_at, worker_dies_at
        self.eval_n_envs = eval_n_envs
        self.record = np_mp_array(6, np.int64)

    @property
    def batch_size(self):
        return self.batch_spec.size

    def async_initialize(self, agent, bootstrap_value=False, traj_info_kwargs=None, seed=None):
        agent.initialize_shared()
        self.agent, self.seed = agent, seed
        self.init_kwargs = dict(
            bootstrap_value=bootstrap_value, traj_info_kwargs=traj_info_kwargs, seed=seed
        )
        T, B = self.batch_spec.T, self.batch_spec.B
        self.buffers = tuple(
            ToySamples(
                np_mp_array((T, B, OBS_DIM), np.float32),
                np_mp_array((T, B), np.float32),
                np_mp_array((T, B), np.int64),
            )
            for _ in range(2)
        )
        return self.buffers, {"observation": np.zeros(OBS_DIM, np.float32)}

    def initialize(self, affinity=None):
        self.agent.async_cpu()
        self.rng = np.random.default_rng(self.seed)
        self.record[INITIALIZED] = 1
        self.record[AFFINITY_MARK] = (affinity or {}).get("toy_mark", 0)

    def obtain_samples(self, itr, db_idx=0):
        if itr == self.fail_at:
            raise RuntimeError(f"toy sampler failed at {itr}")
        if itr == self.die_at:
            os._exit(3)
        if itr == self.die_holding_lock_at:
            self.agent.lock.acquire()
            os._exit(4)
        if itr == self.worker_dies_at:
            raise ToyWorkerError(f"toy sampler worker 1 (pid 12345) was killed by SIGKILL at {itr}")
        if self.delay:
            time.sleep(self.delay)
        self.agent.recv_shared_memory()
        self.record[RECEIVED] = self.agent.received
        T, B = self.batch_spec.T, self.batch_spec.B
        observation = self.rng.normal(size=(T, B, OBS_DIM)).astype(np.float32)
        half = self.buffers[db_idx]
        half.observation[:] = observation
        half.reward[:] = observation @ TRUE_WEIGHT
        half.batch[:] = itr
        self.record[BATCHES] += 1
        return [ToyTrajInfo(T, float(itr))]

    def evaluate_agent(self, itr):
        self.record[EVALUATIONS] += 1
        return [ToyTrajInfo(5, float(itr)), ToyTrajInfo(5, float(itr) + 1)]

    def shutdown(self):
        self.record[SHUT_DOWN] = 1


class ToyReplay:
    """Whole batches on shared memory behind a lock (it goes to the copier's process);
    keeps the order batches arrived in, and refuses a batch that mixes iterations (its half
    was overwritten while it was copied)."""

    def __init__(self, n_batches, T, B):
        self.lock = PipeLock()
        self.observation = np_mp_array((n_batches, T, B, OBS_DIM), np.float32)
        self.reward = np_mp_array((n_batches, T, B), np.float32)
        self.order = np_mp_array(n_batches, np.int64)
        self.count = np_mp_array(1, np.int64)

    def append_samples(self, samples):
        with self.lock:
            marks = np.unique(samples.batch)
            if len(marks) != 1:
                raise ValueError(f"a batch mixes sampler iterations {marks.tolist()}")
            k = int(self.count[0])
            self.observation[k] = samples.observation
            self.reward[k] = samples.reward
            self.order[k] = marks[0]
            self.count[0] = k + 1

    def sample(self, n, generator):
        with self.lock:
            k = int(self.count[0])
            observation = torch.tensor(self.observation[:k]).reshape(-1, OBS_DIM)
            reward = torch.tensor(self.reward[:k]).reshape(-1)
        idx = torch.randint(len(reward), (n,), generator=generator)
        return observation[idx], reward[idx]


class ToyAsyncAlgo:
    """Regresses the reward on the observation from the replay alone: one SGD step on
    ``batch_size`` replayed samples per update, ``updates_per_optimize`` updates a call,
    learning from sampler iteration ``min_itr_learn``. ``update_delay``: seconds per update
    (a slow optimizer); ``fail_copy_at``: ``samples_to_buffer`` raises on that batch (in the
    copier's process). ``record``: (updates done, batches in the replay, sampler_itr) after
    each call."""

    opt_info_fields = OptInfo._fields

    def __init__(
        self,
        replay_ratio=4,
        batch_size=8,
        min_itr_learn=2,
        updates_per_optimize=1,
        update_delay=0.0,
        fail_copy_at=None,
        lr=0.02,
        discount=0.99,
    ):
        self.replay_ratio, self.batch_size = replay_ratio, batch_size
        self.min_itr_learn, self.updates_per_optimize = min_itr_learn, updates_per_optimize
        self.update_delay, self.fail_copy_at = update_delay, fail_copy_at
        self.lr, self.discount = lr, discount
        self.update_counter = 0
        self.record: list[tuple[int, int, int]] = []

    def async_initialize(
        self, agent, sampler_n_itr, batch_spec, mid_batch_reset, examples, world_size=1
    ):
        self.agent = agent
        self.async_kwargs = dict(
            sampler_n_itr=sampler_n_itr,
            batch_spec=batch_spec,
            mid_batch_reset=mid_batch_reset,
            examples=examples,
            world_size=world_size,
        )
        self.replay_buffer = ToyReplay(sampler_n_itr, batch_spec.T, batch_spec.B)
        return self.replay_buffer

    def optim_initialize(self, rank=0):
        self.optimizer = torch.optim.SGD(self.agent.parameters(), lr=self.lr)
        self.generator = torch.Generator().manual_seed(rank)

    def samples_to_buffer(self, samples):
        if self.fail_copy_at is not None and int(samples.batch[0, 0]) == self.fail_copy_at:
            raise ValueError(f"cannot copy batch {self.fail_copy_at}")
        return samples

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        info = OptInfo([], [])
        for _ in range(self.updates_per_optimize):
            if self.update_delay:
                time.sleep(self.update_delay)
            observation, target = self.replay_buffer.sample(self.batch_size, self.generator)
            self.optimizer.zero_grad()
            loss = ((self.agent.model(observation).squeeze(-1) - target) ** 2).mean()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(), 1e6)
            self.optimizer.step()
            info.loss.append(loss.item())
            info.gradNorm.append(float(grad_norm))
            self.update_counter += 1
        self.record.append((self.update_counter, int(self.replay_buffer.count[0]), sampler_itr))
        self.torch_threads = torch.get_num_threads()  # (the optimizer's, while it trains)
        return info

    def optim_state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_optim_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])


def make_async(sampler_kwargs=None, algo_kwargs=None):
    """A fresh (algo, agent, sampler) for the asynchronous runners."""
    torch.manual_seed(0)
    return (
        ToyAsyncAlgo(**(algo_kwargs or {})),
        ToyAsyncAgent(),
        ToyAsyncSampler(**(sampler_kwargs or {})),
    )


# ------------------------------------------------------------------ on-policy runner toys
# For OnPolicyRunner: an agent whose model normalises observations by running statistics
# (buffers in its state dict) and that hands out a deployable policy.


class ToyNormalizedModel(torch.nn.Module):
    """A linear model of observations minus their running mean; ``obs_mean`` and
    ``obs_count`` are buffers, updated by every forward in training mode."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(OBS_DIM, 1)
        self.register_buffer("obs_mean", torch.zeros(OBS_DIM))
        self.register_buffer("obs_count", torch.zeros(()))

    def forward(self, observation):
        if self.training:
            with torch.no_grad():
                flat = observation.reshape(-1, OBS_DIM)
                total = self.obs_count + len(flat)
                self.obs_mean += (flat.sum(0) - len(flat) * self.obs_mean) / total
                self.obs_count.copy_(total)
        return self.linear(observation - self.obs_mean)


class ToyInferenceModule(torch.nn.Module):
    """The deployable policy of ``ToyPolicyAgent``: the model's output for normalised
    observations [B, OBS_DIM] -> actions [B] (a Gaussian's mean); counts its calls since
    ``reset()``, as a recurrent policy keeps a state."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.calls = 0

    def forward(self, observation):
        self.calls += 1
        return self.model.linear(observation - self.model.obs_mean).squeeze(-1)

    def reset(self):
        self.calls = 0


class ToyPolicyAgent(ToyAgent):
    """``ToyAgent`` with a ``ToyNormalizedModel`` and ``inference_policy()``."""

    def __init__(self):
        super().__init__()
        self.model = ToyNormalizedModel()

    def inference_policy(self):
        return ToyInferenceModule(self.model)


def make_policy(sampler_kwargs=None, algo_kwargs=None):
    """A fresh (algo, ToyPolicyAgent, ToySampler), the weights drawn from a fixed seed."""
    torch.manual_seed(0)
    return ToyAlgo(**(algo_kwargs or {})), ToyPolicyAgent(), ToySampler(**(sampler_kwargs or {}))


# ------------------------------------------------- SyncRl (here: spawned ranks import them)


class RankedToySampler(ToySampler):
    """Each rank draws its own data; ``fail_rank`` fails at ``fail_at`` (by raising, or
    ``kill=True``: by killing its own process)."""

    def __init__(self, *args, fail_rank=None, kill=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail_rank, self.kill = fail_rank, kill

    def initialize(self, agent, affinity=None, seed=None, rank=0, world_size=1, **kwargs):
        examples = super().initialize(agent, affinity, seed, rank=rank, world_size=world_size)
        self.rng = np.random.default_rng([seed, rank])
        self.rank = rank
        if self.fail_rank != rank:
            self.fail_at = None
        return examples

    def obtain_samples(self, itr):
        if itr == self.fail_at and self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().obtain_samples(itr)


class DdpToyAgent(ToyAgent):
    def data_parallel(self):
        self.model = torch.nn.parallel.DistributedDataParallel(self.model)

    def leave_data_parallel(self):
        self.model = self.model.module

    def state_dict(self):
        return getattr(self.model, "module", self.model).state_dict()

    def load_state_dict(self, state_dict):
        return getattr(self.model, "module", self.model).load_state_dict(state_dict)


class CheckedSyncRl(SyncRl):
    """Records, on rank 0, the largest parameter difference between ranks at each row."""

    def _log_interval(self, itr):
        params = torch.cat([p.detach().flatten() for p in self.agent.parameters()])
        everyone = [torch.empty_like(params) for _ in range(self.world_size)]
        dist.all_gather(everyone, params)
        self.param_gaps = getattr(self, "param_gaps", [])
        self.param_gaps.append(max(float((p - params).abs().max()) for p in everyone))
        self.param_norms = [*getattr(self, "param_norms", []), float(params.norm())]
        super()._log_interval(itr)
