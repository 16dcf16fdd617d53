"""Training runs built from a configuration (see ``_config``): ``build`` the runner, ``train``
a new run directory, ``resume`` one.

A run directory is ``<log_dir>/run_<seed>`` and holds ``params.json`` (the configuration under
``"config"``), ``progress.csv``, ``debug.log`` and the checkpoint; ``resume`` and ``evaluate``
(``_evaluate``) rebuild everything from it (``_run_files`` reads it). Every check (environment
id, action space, settings) happens in ``build`` before any directory is made or any process
started; the classes come from ``_choices``, the placement of processes from ``_run_affinity``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

from rl_arrays import as_count
from rl_runners import (
    AsyncRl,
    AsyncRlEval,
    Checkpointer,
    MinibatchRl,
    MinibatchRlEval,
    OnPolicyRunner,
    SyncRl,
    SyncRlEval,
    logger,
    logger_context,
)
from rl_samplers import (
    AtariTrajInfo,
    BatchedSampler,
    TrajInfo,
)

from ._choices import (
    ALGO_CLASSES,
    ASYNC_SAMPLER_CLASSES,
    COLLECTORS,
    ON_POLICY,
    SAMPLER_CLASSES,
    check_replay_memory,
    construct,
    env_kwargs,
    make_agent,
    probe_spaces,
)
from ._config import DEFAULTS, default_preset
from ._envs import (
    atari_game,
    batch_env_spaces,
    is_atari,
    is_batched,
    make_batch_env,
    make_env,
)
from ._run_affinity import (
    async_affinity,
    check_processes,
    config_affinity,
    is_asynchronous,
    process_affinities,
    process_count,
    torchrun_rank,
)
from ._run_files import (
    config_problem,
    load_config,
    more_steps,
    read_run_checkpoint,
    run_dir_of,
    settings_of,
    stopped_before_its_first_checkpoint,
    write_steps,
)
from ._stopped import RunStopped

__all__ = ["RunStopped", "build", "resume", "run_dir_for", "train"]


def _check_stopped(runner: Any, run_dir: Path) -> None:
    if runner.stopped_by is not None:
        raise RunStopped(
            f"stopped by {runner.stopped_by} after {runner.progress.next_itr * runner.itr_batch_size}"
            f" steps; continue with: rl-suite resume {run_dir}"
        )


def build(config: dict[str, Any], affinity: dict[str, Any] | None = None) -> MinibatchRl:
    """The runner (with its sampler, agent and algorithm) for ``config``, nothing started.
    ``affinity``: the runner's cpus, threads, workers and GPU, instead of the ones the
    configuration implies (a sweep run passes its run slot's)."""
    for key in DEFAULTS.keys() & config.keys():  # (each setting of the type of its default)
        problem = config_problem(config[key], DEFAULTS[key], key)
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
    processes = process_count(config)
    check_processes(config, processes)
    asynchronous = is_asynchronous(config, processes)
    spaces = probe_spaces(config)
    agent = make_agent(config, spaces, config["agent"]["deterministic_eval"])
    algo = construct(ALGO_CLASSES[config["algo"]], "algo_kwargs", config["algo_kwargs"])
    check_replay_memory(algo, spaces)
    evaluate = runner_config["evaluate"]
    if evaluate:
        expected = "a positive int when runner.evaluate=True (False: no evaluation)"
        as_count("sampler.eval_n_envs", sampler_config["eval_n_envs"], 1, expected=expected)
    sampler = construct(
        (ASYNC_SAMPLER_CLASSES if asynchronous else SAMPLER_CLASSES)[kind],
        "sampler settings",
        dict(
            EnvCls=make_env,
            env_kwargs=env_kwargs(config),
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
        runner_affinity = async_affinity(affinity)
    elif torchrun_rank() is not None:  # one process of torchrun's, one per GPU on GPUs
        RunnerCls = SyncRlEval if evaluate else SyncRl
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        runner_affinity = process_affinities(affinity, local_processes)
    elif processes == 1:
        RunnerCls = MinibatchRlEval if evaluate else MinibatchRl
    else:
        RunnerCls = SyncRlEval if evaluate else SyncRl
        runner_affinity = process_affinities(affinity, processes)
    return construct(
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
        "runner.processes=1": process_count(config) > 1 or torchrun_rank() is not None,
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
    algo = construct(ALGO_CLASSES[config["algo"]], "algo_kwargs", config["algo_kwargs"])
    sampler = construct(
        BatchedSampler,
        "sampler settings",
        dict(
            make_env=make,
            batch_T=sampler_config["batch_T"],
            batch_B=sampler_config["batch_B"],
            max_decorrelation_steps=sampler_config["max_decorrelation_steps"],
        ),
    )
    return construct(
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
    rank = torchrun_rank()
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
    again = stopped_before_its_first_checkpoint(run_dir)
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
    run_dir, checkpoint = run_dir_of(run_dir, checkpoint)  # (named as given in errors)
    config = load_config(run_dir)
    if steps is not None:
        config = {**config, "steps": more_steps(Path(run_dir), steps)}
    if checkpoint is None and stopped_before_its_first_checkpoint(Path(run_dir)):
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
    with settings_of(run_dir / "params.json"):
        runner = build(config, affinity)
    if checkpointer is not None:
        runner.checkpointer = checkpointer
    run_dir = run_dir.resolve()
    if not run_dir.name.startswith("run_"):  # (the logger writes to <parent>/run_<id>)
        raise ValueError(
            f"cannot resume in {str(run_dir)!r}: a run directory is named run_<id> (run_"
            f"{config['seed']} when made); give it such a name again"
        )
    if torchrun_rank():  # (another of torchrun's processes: rank 0 writes the run directory)
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
            write_steps(run_dir, config["steps"])
        if (note := rounding_note(runner, config)) is not None:
            logger.log(note)
        runner.resume(checkpoint)
    _check_stopped(runner, run_dir)
    return run_dir
