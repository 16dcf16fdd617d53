"""Training runs built from a configuration (see ``_config``): ``train``, ``resume`` and
``evaluate`` a run directory.

A run directory is ``<log_dir>/run_<seed>`` and holds ``params.json`` (the configuration under
``"config"``), ``progress.csv``, ``debug.log`` and the checkpoint; ``resume`` and ``evaluate``
rebuild everything from it. Every check (environment id, action space, settings) happens in
``build`` before any directory is made or any process started.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import inspect
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
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
from rl_arrays import as_count, check_memory
from rl_runners import (
    AsyncRl,
    AsyncRlEval,
    Checkpointer,
    MinibatchRl,
    MinibatchRlEval,
    OnPolicyRunner,
    SyncRl,
    SyncRlEval,
    find_checkpoint,
    load_data,
    logger,
    logger_context,
)
from rl_samplers import (
    AlternatingSampler,
    AsyncAlternatingSampler,
    AsyncCpuSampler,
    AsyncGpuSampler,
    AsyncSerialSampler,
    AtariEnv,
    AtariTrajInfo,
    BatchedSampler,
    CpuResetCollector,
    CpuSampler,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    SerialSampler,
    TrajInfo,
)

from ._config import ALGOS, DEFAULTS, default_preset, merge_config
from ._envs import (
    atari_game,
    batch_env_spaces,
    has_display,
    is_atari,
    is_batched,
    make_batch_env,
    make_env,
    single_env_id,
)
from ._stopped import RunStopped

__all__ = ["RunStopped", "build", "evaluate", "load_config", "resume", "run_dir_for", "train"]


def _check_stopped(runner: Any, run_dir: Path) -> None:
    if runner.stopped_by is not None:
        raise RunStopped(
            f"stopped by {runner.stopped_by} after {runner.progress.next_itr * runner.itr_batch_size}"
            f" steps; continue with: rl-suite resume {run_dir}"
        )


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
assert set(ALGO_CLASSES) == set(ALGOS) == set(ACTION_KINDS)
ON_POLICY = ("a2c", "ppo")  # the algorithms batched environments train


def _action_kind(space: Any) -> str | None:
    if isinstance(getattr(space, "n", None), int):
        return "discrete"
    shape = getattr(space, "shape", None)
    return "continuous" if shape is not None and len(shape) == 1 else None


def _env_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    return {"id": config["env"], **config["env_kwargs"]}


def probe_spaces(config: dict[str, Any]) -> Any:
    """The environment's spaces, from one instance made (and closed) here: an unknown id or
    bad env_kwargs fail now, with the id named."""
    try:
        env = make_env(**_env_kwargs(config))
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
    agent = _construct(AgentCls, "agent settings", kwargs)
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


def _check_replay_memory(algo: Any, spaces: Any) -> None:
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


def _construct(cls: type, what: str, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)`` with an unknown keyword reported as the setting it came from."""
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"{what}: {error}") from error


def config_affinity(config: dict[str, Any]) -> dict[str, Any]:
    """What the runner and sampler read: the CUDA device, torch's threads and the workers."""
    device = str(config["device"])
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if device != "cpu" and match is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    affinity: dict[str, Any] = {}
    threads = config["torch_threads"]
    if threads is not None:
        expected = "a positive int or None"
        affinity["master_torch_threads"] = as_count("torch_threads", threads, 1, expected=expected)
    if match is not None:
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but torch sees {torch.cuda.device_count()} GPU(s)"
            )
        affinity["cuda_idx"] = index
    workers = config["sampler"]["workers"]
    if workers is not None:
        if config["sampler"]["kind"] == "serial":
            raise ValueError("sampler.workers applies to the cpu and gpu samplers, not serial")
        B = config["sampler"]["batch_B"]
        expected = f"an int from 1 to batch_B={B}"
        n_workers = as_count("sampler.workers", workers, 1, expected=expected)  # 4.0 too
        if n_workers > B:
            raise ValueError(f"sampler.workers must be {expected}, got {workers!r}")
        affinity["workers_cpus"] = [None] * n_workers  # one worker each, not pinned
    return affinity


def _torchrun_rank() -> int | None:
    """This process's rank in a job started by torchrun (None outside one)."""
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return int(os.environ["RANK"]) if all(name in os.environ for name in names) else None


def _processes(config: dict[str, Any]) -> int:
    processes = config["runner"].get("processes", 1)
    return as_count("runner.processes", processes, 1, expected="a positive int")  # 2.0 too


def _check_processes(config: dict[str, Any], processes: int) -> None:
    if (processes > 1 or _torchrun_rank() is not None) and config["algo"] in QPG_AGENTS:
        raise ValueError(
            f"runner.processes > 1 does not work for {config['algo']} (its Q networks are not "
            "all-reduced); train it in one process, or with runner.asynchronous=True"
        )


def _asynchronous(config: dict[str, Any], processes: int) -> bool:
    asynchronous = config["runner"].get("asynchronous", False)
    if not isinstance(asynchronous, bool):
        raise ValueError(f"runner.asynchronous must be True or False, got {asynchronous!r}")
    if asynchronous and not hasattr(ALGO_CLASSES[config["algo"]], "async_initialize"):
        replay = ", ".join(a for a, cls in ALGO_CLASSES.items() if hasattr(cls, "async_initialize"))
        raise ValueError(
            f"runner.asynchronous needs a replay algorithm ({replay}); {config['algo']} learns "
            "from each batch as it comes"
        )
    if asynchronous and (processes > 1 or _torchrun_rank() is not None):
        raise ValueError("runner.asynchronous runs one optimizer: not with runner.processes > 1")
    return asynchronous


def _async_affinity(affinity: dict[str, Any]) -> dict[str, Any]:
    """The asynchronous runner's split: the sampler's process (its cpus, its workers, one
    torch thread to act) and the optimizer's (the cpus, threads and GPU asked for)."""
    shared = {k: v for k, v in affinity.items() if k in ("master_cpus", "set_affinity")}
    workers = {k: v for k, v in affinity.items() if k.startswith("worker")}
    optimizer = {k: v for k, v in affinity.items() if k in ("master_torch_threads", "cuda_idx")}
    sampler = {**shared, **workers, "master_torch_threads": 1}
    return {"sampler": sampler, "optimizer": [{**shared, **optimizer}]}


def _process_affinities(affinity: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One affinity per process of a synchronous run: the same cpus and threads, and on GPUs
    consecutive devices from the one asked for."""
    cuda_idx = affinity.get("cuda_idx")
    if cuda_idx is not None and cuda_idx + processes > torch.cuda.device_count():
        raise ValueError(
            f"runner.processes={processes} on GPUs from cuda:{cuda_idx} needs "
            f"{cuda_idx + processes} GPUs; torch sees {torch.cuda.device_count()}"
        )
    return [
        {**affinity, **({} if cuda_idx is None else {"cuda_idx": cuda_idx + rank})}
        for rank in range(processes)
    ]


def build(config: dict[str, Any], affinity: dict[str, Any] | None = None) -> MinibatchRl:
    """The runner (with its sampler, agent and algorithm) for ``config``, nothing started.
    ``affinity``: the runner's cpus, threads, workers and GPU, instead of the ones the
    configuration implies (a sweep run passes its run slot's)."""
    for key in DEFAULTS.keys() & config.keys():  # (each setting of the type of its default)
        problem = _config_problem(config[key], DEFAULTS[key], key)
        if problem is not None:
            raise ValueError(problem)
    sampler_config, runner_config = config["sampler"], config["runner"]
    kind = sampler_config["kind"]
    if kind not in (*SAMPLER_CLASSES, "batched"):
        raise ValueError(
            f"sampler.kind must be one of {', '.join(SAMPLER_CLASSES)}, batched; got {kind!r}"
        )
    affinity = config_affinity(config) if affinity is None else affinity
    if kind == "batched" or is_batched(config["env"]):
        return _build_batched(config, affinity)
    processes = _processes(config)
    _check_processes(config, processes)
    asynchronous = _asynchronous(config, processes)
    spaces = probe_spaces(config)
    agent = make_agent(config, spaces, config["agent"]["deterministic_eval"])
    algo = _construct(ALGO_CLASSES[config["algo"]], "algo_kwargs", config["algo_kwargs"])
    _check_replay_memory(algo, spaces)
    evaluate = runner_config["evaluate"]
    if evaluate:
        expected = "a positive int when runner.evaluate=True (False: no evaluation)"
        as_count("sampler.eval_n_envs", sampler_config["eval_n_envs"], 1, expected=expected)
    sampler = _construct(
        (ASYNC_SAMPLER_CLASSES if asynchronous else SAMPLER_CLASSES)[kind],
        "sampler settings",
        dict(
            EnvCls=make_env,
            env_kwargs=_env_kwargs(config),
            batch_T=sampler_config["batch_T"],
            batch_B=sampler_config["batch_B"],
            CollectorCls=COLLECTORS[kind, bool(sampler_config["mid_batch_reset"])],
            max_decorrelation_steps=sampler_config["max_decorrelation_steps"],
            TrajInfoCls=AtariTrajInfo if is_atari(config["env"]) else TrajInfo,
            eval_n_envs=sampler_config["eval_n_envs"] if evaluate else 0,
            eval_max_steps=sampler_config["eval_max_steps"],
            eval_max_trajectories=sampler_config["eval_max_trajectories"],
            **(
                {}
                if kind == "serial"  # (runs saved before the setting existed: its default)
                else {"worker_timeout": sampler_config.get("worker_timeout", 300.0)}
            ),
        ),
    )
    runner_kwargs = {}
    if runner_config["stop_return"] is not None:
        if not evaluate:
            raise ValueError("runner.stop_return needs runner.evaluate=True")
        runner_kwargs["stop_return"] = runner_config["stop_return"]
    runner_affinity: dict[str, Any] | list[dict[str, Any]] = affinity
    if asynchronous:
        RunnerCls: type[MinibatchRl] = AsyncRlEval if evaluate else AsyncRl
        runner_affinity = _async_affinity(affinity)
    elif _torchrun_rank() is not None:  # one process of torchrun's, one per GPU on GPUs
        RunnerCls = SyncRlEval if evaluate else SyncRl
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        runner_affinity = _process_affinities(affinity, local_processes)
    elif processes == 1:
        RunnerCls = MinibatchRlEval if evaluate else MinibatchRl
    else:
        RunnerCls = SyncRlEval if evaluate else SyncRl
        runner_affinity = _process_affinities(affinity, processes)
    return _construct(
        RunnerCls,
        "runner settings",
        dict(
            **runner_kwargs,
            algo=algo,
            agent=agent,
            sampler=sampler,
            n_steps=config["steps"],
            seed=config["seed"],
            affinity=runner_affinity,
            log_interval_steps=runner_config["log_interval_steps"],
            checkpoint_replay=runner_config["checkpoint_replay"],
        ),
    )


def _build_batched(config: dict[str, Any], affinity: dict[str, Any]) -> OnPolicyRunner:
    """``build`` for a batched environment: ``BatchedSampler`` (the envs on ``device``) and
    ``OnPolicyRunner``, one process, no evaluation."""
    sampler_config, runner_config, env = config["sampler"], config["runner"], config["env"]
    if config["algo"] not in ON_POLICY:
        raise ValueError(f"batched environments train ppo or a2c, not {config['algo']}")
    if not is_batched(env):
        instead = f"ale:{atari_game(env)}" if is_atari(env) else f"vec:{env}"
        raise ValueError(
            f"sampler.kind=batched steps torch:<name>, vec:<gymnasium id> or ale:<game> "
            f"environments; for {env!r} write {instead} (or choose another sampler.kind)"
        )
    if sampler_config["kind"] != "batched":
        preset = default_preset(config["algo"], env)  # (batched; atari-batched for ale:)
        hint = (
            f", or use the {preset!r} preset (--preset {preset})"
            if preset is not None
            else f" (the presets for batched envs are ppo's, none is made for {config['algo']})"
        )
        raise ValueError(f"{env} steps in the batched sampler: set sampler.kind=batched{hint}")
    fixes = {  # what BatchedSampler and OnPolicyRunner do not do, and the setting that asks
        "sampler.workers=None": sampler_config["workers"] is not None,
        "runner.evaluate=False": runner_config["evaluate"],
        "runner.processes=1": _processes(config) > 1 or _torchrun_rank() is not None,
        "runner.asynchronous=False": runner_config.get("asynchronous", False),
    }
    if any(fixes.values()):
        asked = ", ".join(fix for fix, needed in fixes.items() if needed)
        raise ValueError(
            f"batched environments train in one process, without workers or evaluation: set {asked}"
        )
    make = functools.partial(
        make_batch_env, id=env, device=config["device"], **config["env_kwargs"]
    )
    probe = _probe_batch_env(make, env)
    agent = make_agent(config, probe, config["agent"]["deterministic_eval"])
    algo = _construct(ALGO_CLASSES[config["algo"]], "algo_kwargs", config["algo_kwargs"])
    sampler = _construct(
        BatchedSampler,
        "sampler settings",
        dict(
            make_env=make,
            batch_T=sampler_config["batch_T"],
            batch_B=sampler_config["batch_B"],
            max_decorrelation_steps=sampler_config["max_decorrelation_steps"],
        ),
    )
    return _construct(
        OnPolicyRunner,
        "runner settings",
        dict(
            algo=algo,
            agent=agent,
            sampler=sampler,
            n_steps=config["steps"],
            seed=config["seed"],
            affinity=affinity,
            log_interval_steps=runner_config["log_interval_steps"],
            checkpoint_replay=runner_config["checkpoint_replay"],
        ),
    )


def _probe_batch_env(make: Any, env: str) -> Any:
    """The spaces of one env of ``make`` (made and closed here: a bad id or env_kwargs fail
    now, with the id named)."""
    try:
        probe = make(1)
    except Exception as error:  # gymnasium and the torch envs raise their own error types
        raise ValueError(f"cannot make environment {env!r}: {error}") from error
    try:
        return batch_env_spaces(probe)
    finally:
        probe.close()


def run_dir_for(config: dict[str, Any], log_dir: str | Path | None) -> Path:
    """``<log_dir>/run_<seed>``; by default ``log_dir`` is ``runs/<algo>-<env>``."""
    if log_dir is None:
        env = re.sub(r"[^A-Za-z0-9._-]+", "_", config["env"])
        log_dir = Path("runs") / f"{config['algo']}-{env}"
    return Path(log_dir).resolve() / f"run_{config['seed']}"


def _name(config: dict[str, Any]) -> str:
    return f"{config['algo']}_{config['env']}"


def train(
    config: dict[str, Any],
    log_dir: str | Path | None = None,
    affinity: dict[str, Any] | None = None,
    checkpointer: Checkpointer | None = None,
) -> Path:
    """Train as ``config`` says, logging into a new run directory; returns that directory.

    A directory that already holds a run is refused (nothing is overwritten): resume it, or
    pick another ``log_dir`` or seed. One whose run failed before it logged anything (an
    empty ``progress.csv``: e.g. settings the algorithm refused at start-up), or stopped
    before its first checkpoint (its rows are dropped), is used again.
    ``affinity``: see ``build``. ``checkpointer``: writes the snapshots in place of the
    runner's own (the Ray engine's also hands each one to Tune).

    Under torchrun, every process of the job calls this; rank 0 writes the run directory.
    """
    rank = _torchrun_rank()
    if rank is not None:
        processes = int(os.environ["WORLD_SIZE"])
        config = {**config, "runner": {**config["runner"], "processes": processes}}
    runner = build(config, affinity)
    if checkpointer is not None:
        runner.checkpointer = checkpointer
    run_dir = run_dir_for(config, log_dir)
    if rank:
        runner.train()
        return run_dir
    progress = run_dir / "progress.csv"
    again = _stopped_before_its_first_checkpoint(run_dir)
    if progress.exists() and progress.stat().st_size > 0 and not again:
        raise FileExistsError(
            f"{run_dir} already holds a run: continue it with `rl-suite resume {run_dir}`, or "
            "choose another --log-dir or --seed"
        )
    with logger_context(
        run_dir.parent,
        config["seed"],
        _name(config),
        log_params={"config": config},
        snapshot_mode=config["runner"]["snapshot_mode"],
        override_prefix=True,
        log_to=config.get("log_to", ()),  # (runs saved before it have none)
    ):
        if again:  # (its rows lead nowhere: it starts over)
            logger.log(f"{run_dir} holds no checkpoint of its run: training it again.")
            logger.truncate_tabular(0)
        if (note := rounding_note(runner, config)) is not None:
            logger.log(note)
        runner.train()
    _check_stopped(runner, run_dir)
    return run_dir


def _more_steps(run_dir: Path, steps: int) -> int:
    """``steps`` for a resume, checked: no fewer than the run has trained."""
    steps = as_count("steps", steps, 1, expected="a positive int")
    done = _steps_done(run_dir)
    if steps < done:
        raise ValueError(
            f"--steps {steps:,}: the run in {run_dir} has trained {done:,} already; give more"
        )
    return steps


def _write_steps(run_dir: Path, steps: int) -> None:
    """``steps`` into the run's ``params.json`` (replaced whole), so that a later resume goes
    on to them too."""
    params_file = run_dir / "params.json"
    params = json.loads(params_file.read_text(encoding="utf-8"))
    params["config"]["steps"] = steps
    temporary = params_file.with_name(params_file.name + ".tmp")
    temporary.write_text(json.dumps(params, indent=2), encoding="utf-8")
    os.replace(temporary, params_file)


def _steps_done(run_dir: Path) -> int:
    """The environment steps of the run's last logged row (0 before any)."""
    try:
        with open(run_dir / "progress.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return int(float(rows[-1]["CumSteps"])) if rows and rows[-1].get("CumSteps") else 0


def _stopped_before_its_first_checkpoint(run_dir: Path) -> bool:
    """A run directory of a run that keeps checkpoints, but holds none (it was killed before
    its first was committed): nothing in it can be continued."""
    try:
        if load_config(run_dir)["runner"]["snapshot_mode"] == "none":
            return False
        find_checkpoint(run_dir)
    except FileNotFoundError as error:
        return "holds no checkpoint" in str(error)
    except (OSError, ValueError):
        return False
    return False


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """The configuration a run directory was trained with (its ``params.json``), its shape
    checked: a missing, damaged or mistyped file is an error that names it."""
    params_file = Path(run_dir) / "params.json"
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(
            f"{run_dir} is not a directory: give a run directory (`rl-suite train` prints the "
            "one it makes)"
        )
    if not params_file.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a run directory: it has no params.json (give the directory "
            "`rl-suite train` printed; for a sweep, one of its run_* directories)"
        )
    redo = "restore it from a copy, or train the run again"
    try:
        params = json.loads(params_file.read_text(encoding="utf-8"))
    except ValueError as error:  # (not UTF-8, or not JSON)
        raise ValueError(f"{params_file} is not valid JSON (damaged?): {error}; {redo}") from error
    if not isinstance(params, dict) or "config" not in params:
        raise ValueError(
            f"{params_file} was not written by `rl-suite train` (no 'config'): give the "
            "directory of a run it trained"
        )
    problem = _config_problem(params["config"], DEFAULTS, "config")
    if problem is not None:
        raise ValueError(f"{params_file}: {problem}; correct it, or train the run again")
    return params["config"]


_SAVED_KEYS = ("algo", "env", "seed", "steps", "sampler", "agent", "runner")  # (every version)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The configuration of ``train --config FILE``: a JSON object of settings, the schema
    of a run's ``params.json`` (so that file itself works: its ``config`` is taken), the
    settings it leaves out at their defaults. Errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such configuration file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    settings = data.get("config", data) if isinstance(data, dict) else data
    if not isinstance(settings, dict) or "algo" not in settings:
        raise ValueError(
            f"{path} holds no configuration: a JSON object of settings with at least 'algo' "
            "(e.g. a run's params.json, or what `rl-suite train ... --dry-run` prints)"
        )
    config = copy.deepcopy(DEFAULTS)
    try:
        merge_config(config, settings)
    except (KeyError, ValueError) as error:
        raise ValueError(f"{path}: {error.args[0] if error.args else error}") from error
    problem = _config_problem(config, DEFAULTS, "config")
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    return config


def rounding_note(runner: Any, config: dict[str, Any]) -> str | None:
    """One line saying how the steps asked for became the steps the runner trains (whole
    iterations in whole log intervals: the nearest such count), when they differ; else
    None."""
    steps, batch = config["steps"], runner.itr_batch_size
    planned = runner.n_itr * batch
    if not isinstance(steps, int) or planned == steps:
        return None
    interval = runner.log_interval_itrs * batch
    return (
        f"steps: {steps:,} asked for, {planned:,} trained: whole iterations of {batch:,} "
        f"environment steps (sampler.batch_T x batch_B) in whole log intervals of "
        f"{interval:,} (runner.log_interval_steps)"
    )


def _config_problem(value: Any, default: Any, where: str) -> str | None:
    """What makes a saved setting unusable, judged by the type of its default: groups are
    JSON objects, flags true or false, numbers numbers, names strings (None: anything)."""
    if isinstance(default, dict):
        if not isinstance(value, dict):
            return f"{where} must be a JSON object of settings, got {value!r}"
        if where == "config":
            missing = [key for key in _SAVED_KEYS if key not in value]
            if missing:
                return f"config lacks {', '.join(missing)}"
            if value["algo"] not in ALGOS:
                return f"config.algo must be one of {', '.join(ALGOS)}, got {value['algo']!r}"
        if where.endswith("_kwargs"):  # (keyword arguments: their classes check them)
            return None
        for key in default.keys() & value.keys():
            problem = _config_problem(value[key], default[key], f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(default, bool):
        expected = None if isinstance(value, bool) else "true or false"
    elif isinstance(default, int | float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        expected = None if number else "a number"
    elif isinstance(default, str):
        expected = None if isinstance(value, str) else "a string"
    else:  # (None: the class it goes to checks it)
        expected = None
    return None if expected is None else f"{where} must be {expected}, got {value!r}"


@contextlib.contextmanager
def _settings_of(params_file: Path) -> Iterator[None]:
    """Errors building what a saved configuration describes name the file it came from."""
    try:
        yield
    except (ValueError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ValueError(
            f"{params_file}: {message} (the run's saved configuration; correct it, or train "
            "the run again)"
        ) from error


_CHECKPOINT_FILE = re.compile(r"params\.pt|itr_(\d+)\.pt")


def _other_checkpoints(checkpoint: Path, command: str) -> str:
    """What to do about a damaged checkpoint: use the run's latest other one, if any."""
    others: dict[Path, float] = {}  # params.pt ("last" mode) first, then itr_<n>.pt, n down
    for path in checkpoint.parent.iterdir():
        if (match := _CHECKPOINT_FILE.fullmatch(path.name)) and path != checkpoint:
            others[path] = -int(match.group(1)) if match.group(1) else -math.inf
    if not others:
        return f"{checkpoint.parent} holds no other checkpoint: train the run again"
    latest = min(others, key=lambda path: others[path])
    return f"use another of the run's checkpoints: rl-suite {command} {latest}"


def _run_dir_of(path: str | Path, checkpoint: str | Path | None) -> tuple[Path, Any]:
    """``(run directory, checkpoint)`` for a run directory or one of its checkpoint files."""
    if Path(path).suffix == ".pt" and Path(path).is_file() and checkpoint is None:
        return Path(path).parent, Path(path)
    return Path(path), checkpoint


def _first_line(error: BaseException) -> str:
    """The gist of an error from a library: its first sentence (torch's run to paragraphs)."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line.split(". ")[0] if len(line) > 100 else line


def read_run_checkpoint(path: str | Path, command: str = "eval") -> tuple[Path, dict[str, Any]]:
    """The checkpoint ``path`` names (a file, or a run directory: see ``find_checkpoint``)
    and its content; with ``command="resume"`` the environments' state saved beside it is
    read too. A damaged file is a ValueError that names it and another checkpoint to use."""
    checkpoint_path = find_checkpoint(path)
    try:
        if checkpoint_path.stat().st_size == 0:
            raise ValueError("the file is empty")
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        if not isinstance(checkpoint, dict) or "agent_state_dict" not in checkpoint:
            raise ValueError("it holds no agent_state_dict")
    except Exception as error:  # (zip, pickle, EOF and weights-only errors alike)
        raise ValueError(
            f"{checkpoint_path} is not a readable checkpoint (truncated or damaged?): "
            f"{_first_line(error)}; {_other_checkpoints(checkpoint_path, command)}"
        ) from error
    sampler_file = checkpoint.get("sampler_file")
    if command == "resume" and sampler_file and (checkpoint_path.parent / sampler_file).is_file():
        try:
            load_data(checkpoint_path.parent / sampler_file)
        except ValueError as error:
            raise ValueError(
                f"{checkpoint_path.parent / sampler_file} (the environments' state saved with "
                f"{checkpoint_path.name}) is not readable (truncated or damaged?): "
                f"{_first_line(error)}; {_other_checkpoints(checkpoint_path, command)}"
            ) from error
    return checkpoint_path, checkpoint


def resume(
    run_dir: str | Path,
    *,
    checkpoint: str | Path | None = None,
    affinity: dict[str, Any] | None = None,
    checkpointer: Checkpointer | None = None,
    steps: int | None = None,
) -> Path:
    """Continue the run in ``run_dir`` from its checkpoint (or from ``checkpoint``, a file or
    a directory that holds one; ``run_dir`` may also be one of its checkpoint files) to its
    configured steps, appending to the same ``progress.csv``. ``affinity``: see ``build``;
    ``checkpointer``: see ``train``. ``steps``: train to this many steps instead (a
    finished run is extended), written into ``params.json`` first; schedules over the run
    (PPO's linear one, epsilon's) then span the new length.

    A run of several processes (``runner.processes``, or torchrun's, where every process
    calls this) resumes with the same number: each loads the model, optimizer and counters,
    rank 0 also its environments' state; the other ranks' environments restart."""
    run_dir, checkpoint = _run_dir_of(run_dir, checkpoint)  # (named as given in errors)
    config = load_config(run_dir)
    if steps is not None:
        config = {**config, "steps": _more_steps(Path(run_dir), steps)}
    if checkpoint is None and _stopped_before_its_first_checkpoint(Path(run_dir)):
        raise FileNotFoundError(
            f"{run_dir} holds no checkpoint: its run stopped before the first was written; "
            "`rl-suite train` with the same settings starts it again"
        )
    checkpoint, _ = read_run_checkpoint(run_dir if checkpoint is None else checkpoint, "resume")
    progress = run_dir / "progress.csv"
    try:  # (the logger reads it to append)
        if progress.is_file():
            progress.read_text(encoding="utf-8")
    except ValueError as error:
        raise ValueError(
            f"{progress} is not readable text (damaged?): {error}; resume appends to it: "
            "restore it, or move it away to start a new one"
        ) from error
    with _settings_of(run_dir / "params.json"):
        runner = build(config, affinity)
    if checkpointer is not None:
        runner.checkpointer = checkpointer
    run_dir = run_dir.resolve()
    if not run_dir.name.startswith("run_"):  # (the logger writes to <parent>/run_<id>)
        raise ValueError(
            f"cannot resume in {str(run_dir)!r}: a run directory is named run_<id> (run_"
            f"{config['seed']} when made); give it such a name again"
        )
    if _torchrun_rank():  # (another of torchrun's processes: rank 0 writes the run directory)
        runner.resume(checkpoint)
        return run_dir
    with logger_context(
        run_dir.parent,
        run_dir.name.removeprefix("run_"),  # (a copy renamed run_<other> resumes in place)
        _name(config),
        snapshot_mode=config["runner"]["snapshot_mode"],
        override_prefix=True,
        log_to=config.get("log_to", ()),  # (runs saved before it have none)
    ):
        if steps is not None:  # (under the run directory's lock)
            _write_steps(run_dir, config["steps"])
        if (note := rounding_note(runner, config)) is not None:
            logger.log(note)
        runner.resume(checkpoint)
    _check_stopped(runner, run_dir)
    return run_dir


def evaluate(
    run_dir: str | Path,
    episodes: int = 10,
    deterministic: bool = False,
    seed: int = 12345,
    *,
    env: str | None = None,
    video_dir: str | Path | None = None,
    render: bool = False,
) -> list[Any]:
    """Play ``episodes`` evaluation episodes with the agent of the run's latest checkpoint
    (``run_dir`` may also be one of its checkpoint files, ``itr_<n>.pt``); returns their
    trajectory infos (``Return``, ``Length`` ...). ``env``: another environment id to play,
    with the same spaces (the run's ``env_kwargs`` kept); ``video_dir``: one MP4 per episode
    written there; ``render``: shown in a window (needs a display)."""
    episodes = as_count("episodes", episodes, 1, expected="a positive int")  # 10.0 too
    run_dir, checkpoint = _run_dir_of(run_dir, None)
    config = evaluation_config(load_config(run_dir), run_dir)
    checkpoint_path, saved = read_run_checkpoint(run_dir if checkpoint is None else checkpoint)
    spaces = probe_spaces(config)
    if env is not None and env != config["env"]:
        trained = config["env"]
        config = {**config, "env": env}
        _check_same_spaces(spaces, probe_spaces(config), trained, env)
    eval_env_kwargs = _env_kwargs(config)
    if render and video_dir is not None:
        raise ValueError("--render and --video: show the episodes or record them, not both")
    if render:
        if not has_display():
            raise ValueError(
                "--render opens a window, and this machine has no display (neither DISPLAY nor "
                "WAYLAND_DISPLAY is set): record the episodes with --video DIR instead"
            )
        eval_env_kwargs["render_mode"] = "human"
    if video_dir is not None:
        eval_env_kwargs.update(video_dir=str(video_dir), video_episodes=episodes)
    with _settings_of(run_dir / "params.json"):
        agent = make_agent(config, spaces, deterministic)
    # One environment, episodes one after another: with several at once, the first episodes to
    # end (the short ones) would fill the count before the long ones finish.
    sampler = SerialSampler(
        EnvCls=make_env,
        env_kwargs=_env_kwargs(config),
        eval_env_kwargs=eval_env_kwargs,
        batch_T=1,
        batch_B=1,
        max_decorrelation_steps=0,
        TrajInfoCls=AtariTrajInfo if is_atari(config["env"]) else TrajInfo,
        eval_n_envs=1,
        eval_max_steps=10**7,
        eval_max_trajectories=episodes,
    )
    sampler.initialize(agent, seed=seed)
    try:
        load_weights(agent, saved, checkpoint_path, run_dir)
        agent.eval_mode(0)
        infos = list(sampler.evaluate_agent(0))
    finally:
        sampler.shutdown()
    return infos


def _check_same_spaces(trained: Any, other: Any, trained_id: str, other_id: str) -> None:
    """A ValueError naming both environments when ``other``'s spaces differ from the ones the
    agent was trained on."""
    for part in ("observation", "action"):
        a, b = getattr(trained, part), getattr(other, part)
        if _space_summary(a) != _space_summary(b):
            raise ValueError(
                f"{other_id} has another {part} space than {trained_id}, which the agent was "
                f"trained on: {_space_summary(b)} against {_space_summary(a)}"
            )


def _space_summary(space: Any) -> tuple[Any, ...]:
    return (
        type(space).__name__,
        tuple(getattr(space, "shape", ()) or ()),
        str(getattr(space, "dtype", "")),
        getattr(space, "n", None),
    )


def load_weights(agent: Any, saved: dict[str, Any], checkpoint: Path, run_dir: Path) -> None:
    """The checkpoint's agent weights into ``agent`` (initialized), or a ValueError naming
    both files when they do not fit."""
    try:
        agent.load_state_dict(saved["agent_state_dict"])
    except RuntimeError as error:  # (missing or mis-shaped weights)
        raise ValueError(
            f"{checkpoint} does not fit the agent {run_dir / 'params.json'} describes: "
            f"{_first_line(error)}; were the files mixed up?"
        ) from error


def evaluation_config(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``config`` with one environment to play: a batched environment's run plays the
    gymnasium environment of the same dynamics."""
    if not is_batched(config["env"]):
        return config
    if config["env"].startswith("torch:") and config["env_kwargs"]:
        raise ValueError(
            f"{run_dir} trained on {config['env']} with env_kwargs {config['env_kwargs']}: "
            "evaluation plays the gymnasium env it follows, which has no such settings"
        )
    env_id = single_env_id(config["env"])
    env_kwargs = _single_env_kwargs(env_id, config["env_kwargs"])
    return {**config, "env": env_id, "env_kwargs": env_kwargs}


def _single_env_kwargs(env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A batched run's ``env_kwargs`` that its single env ``env_id`` takes: for Atari,
    ``AtariEnv``'s arguments (not ale-py's vector settings such as ``num_threads``); else
    those not of the vector env (``vector_kwargs``, ``vectorization_mode``)."""
    if is_atari(env_id):
        taken = inspect.signature(AtariEnv).parameters.keys() - {"game"}
        return {k: v for k, v in env_kwargs.items() if k in taken}
    return {k: v for k, v in env_kwargs.items() if "vector" not in k}


def mean_return(infos: list[Any]) -> float:
    returns = [info.Return for info in infos]
    return sum(returns) / len(returns) if returns else math.nan
