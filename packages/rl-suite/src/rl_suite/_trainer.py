"""Training runs built from a configuration (see ``_config``): ``train``, ``resume`` and
``evaluate`` a run directory.

A run directory is ``<log_dir>/run_<seed>`` and holds ``params.json`` (the configuration under
``"config"``), ``progress.csv``, ``debug.log`` and the checkpoint; ``resume`` and ``evaluate``
rebuild everything from it. Every check (environment id, action space, settings) happens in
``build`` before any directory is made or any process started.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import torch

from rl_agents import (
    AtariCatDqnAgent,
    AtariDqnAgent,
    AtariFfAgent,
    AtariLstmAgent,
    AtariR2d1Agent,
    CategoricalFfAgent,
    CategoricalLstmAgent,
    DdpgAgent,
    MujocoFfAgent,
    MujocoLstmAgent,
    SacAgent,
    Td3Agent,
    VectorCatDqnAgent,
    VectorDqnAgent,
    VectorR2d1Agent,
)
from rl_algos import A2C, DDPG, DQN, PPO, R2D1, SAC, TD3, CategoricalDQN
from rl_arrays import as_count
from rl_runners import (
    AsyncRl,
    AsyncRlEval,
    MinibatchRl,
    MinibatchRlEval,
    SyncRl,
    SyncRlEval,
    find_checkpoint,
    logger_context,
)
from rl_samplers import (
    AsyncCpuSampler,
    AsyncGpuSampler,
    AsyncSerialSampler,
    AtariTrajInfo,
    CpuResetCollector,
    CpuSampler,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    SerialSampler,
    TrajInfo,
)

from ._config import ALGOS
from ._envs import is_atari, make_env

__all__ = ["build", "evaluate", "load_config", "resume", "run_dir_for", "train"]

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
SAMPLER_CLASSES = {"serial": SerialSampler, "cpu": CpuSampler, "gpu": GpuSampler}
ASYNC_SAMPLER_CLASSES = {
    "serial": AsyncSerialSampler,
    "cpu": AsyncCpuSampler,
    "gpu": AsyncGpuSampler,
}
# (sampler kind, mid_batch_reset) -> collector
COLLECTORS = {
    ("serial", True): CpuResetCollector,
    ("serial", False): CpuWaitResetCollector,
    ("cpu", True): CpuResetCollector,
    ("cpu", False): CpuWaitResetCollector,
    ("gpu", True): GpuResetCollector,
    ("gpu", False): GpuWaitResetCollector,
}
# The action spaces each algorithm can act in.
ACTION_KINDS = {
    "a2c": {"discrete", "continuous"},
    "ppo": {"discrete", "continuous"},
    **{algo: {"discrete"} for algo in Q_AGENTS},
    **{algo: {"continuous"} for algo in QPG_AGENTS},
}
assert set(ALGO_CLASSES) == set(ALGOS) == set(ACTION_KINDS)


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
    ndim = len(spaces.observation.shape)
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
        f"no agent for {config['env']}: observations of shape {spaces.observation.shape} with "
        f"{kind} actions (the trainer has agents for vector or [C, H, W] image observations)"
    )


def make_agent(config: dict[str, Any], spaces: Any, deterministic_eval: bool) -> Any:
    """The agent for ``config``, not yet initialized; ``deterministic_eval``: greedy actions
    in eval mode (for a Q-learning agent, an evaluation epsilon of 0; DDPG, TD3 and SAC
    agents always evaluate deterministically)."""
    AgentCls = agent_class(config, spaces)
    kwargs = dict(config["agent_kwargs"], model_kwargs=config["agent"]["model_kwargs"])
    if config["algo"] in Q_AGENTS:
        if deterministic_eval:
            kwargs["eps_eval"] = 0.0
    elif config["algo"] not in QPG_AGENTS:
        kwargs["deterministic_eval"] = deterministic_eval
    return _construct(AgentCls, "agent settings", kwargs)


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
    sampler_config, runner_config = config["sampler"], config["runner"]
    kind = sampler_config["kind"]
    if kind not in SAMPLER_CLASSES:
        raise ValueError(f"sampler.kind must be one of {', '.join(SAMPLER_CLASSES)}, got {kind!r}")
    affinity = config_affinity(config) if affinity is None else affinity
    processes = _processes(config)
    _check_processes(config, processes)
    asynchronous = _asynchronous(config, processes)
    spaces = probe_spaces(config)
    agent = make_agent(config, spaces, config["agent"]["deterministic_eval"])
    algo = _construct(ALGO_CLASSES[config["algo"]], "algo_kwargs", config["algo_kwargs"])
    evaluate = runner_config["evaluate"]
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
) -> Path:
    """Train as ``config`` says, logging into a new run directory; returns that directory.

    A directory that already holds a run is refused (nothing is overwritten): resume it, or
    pick another ``log_dir`` or seed. One whose run failed before it logged anything (an
    empty ``progress.csv``: e.g. settings the algorithm refused at start-up) is used again.
    ``affinity``: see ``build``.

    Under torchrun, every process of the job calls this; rank 0 writes the run directory.
    """
    rank = _torchrun_rank()
    if rank is not None:
        processes = int(os.environ["WORLD_SIZE"])
        config = {**config, "runner": {**config["runner"], "processes": processes}}
    runner = build(config, affinity)
    run_dir = run_dir_for(config, log_dir)
    if rank:
        runner.train()
        return run_dir
    progress = run_dir / "progress.csv"
    if progress.exists() and progress.stat().st_size > 0:
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
    ):
        runner.train()
    return run_dir


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """The configuration a run directory was trained with (its ``params.json``)."""
    params_file = Path(run_dir) / "params.json"
    if not params_file.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory: it has no params.json")
    params = json.loads(params_file.read_text())
    if "config" not in params:
        raise ValueError(f"{params_file} was not written by `rl-suite train` (no 'config')")
    return params["config"]


def resume(run_dir: str | Path) -> Path:
    """Continue the run in ``run_dir`` from its checkpoint to its configured steps, appending
    to the same ``progress.csv``."""
    run_dir = Path(run_dir).resolve()
    config = load_config(run_dir)
    find_checkpoint(run_dir)  # a clear error when the run saved none
    if config["runner"].get("asynchronous", False):
        raise ValueError(
            f"{run_dir} was trained with runner.asynchronous=True: such runs cannot be resumed "
            "(the sampler and the replay live in other processes)"
        )
    if config["runner"].get("processes", 1) > 1:
        raise ValueError(
            f"{run_dir} was trained with runner.processes={config['runner']['processes']}: "
            "such runs cannot be resumed (the checkpoint holds one process's environments)"
        )
    runner = build(config)
    with logger_context(
        run_dir.parent,
        config["seed"],
        _name(config),
        snapshot_mode=config["runner"]["snapshot_mode"],
        override_prefix=True,
    ):
        runner.resume(run_dir)
    return run_dir


def evaluate(
    run_dir: str | Path, episodes: int = 10, deterministic: bool = False, seed: int = 12345
) -> list[Any]:
    """Play ``episodes`` evaluation episodes with the agent of the run's latest checkpoint;
    returns their trajectory infos (``Return``, ``Length`` ...)."""
    episodes = as_count("episodes", episodes, 1, expected="a positive int")  # 10.0 too
    config = load_config(run_dir)
    checkpoint = torch.load(find_checkpoint(run_dir), map_location="cpu", weights_only=True)
    agent = make_agent(config, probe_spaces(config), deterministic)
    # One environment, episodes one after another: with several at once, the first episodes to
    # end (the short ones) would fill the count before the long ones finish.
    sampler = SerialSampler(
        EnvCls=make_env,
        env_kwargs=_env_kwargs(config),
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
        agent.load_state_dict(checkpoint["agent_state_dict"])
        agent.eval_mode(0)
        infos = list(sampler.evaluate_agent(0))
    finally:
        sampler.shutdown()
    return infos


def mean_return(infos: list[Any]) -> float:
    returns = [info.Return for info in infos]
    return sum(returns) / len(returns) if returns else math.nan
