"""Evaluating a trained run: its agent, with the saved weights, plays episodes on its own
environment (or another with the same spaces), rendered or recorded if asked."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

from rl_arrays import as_count
from rl_samplers import (
    AtariEnv,
    AtariTrajInfo,
    SerialSampler,
    TrajInfo,
)

from ._choices import env_kwargs, make_agent, probe_spaces
from ._envs import (
    has_display,
    is_atari,
    is_batched,
    make_env,
    single_env_id,
)
from ._run_files import first_line, load_config, read_run_checkpoint, run_dir_of, settings_of

__all__ = ["evaluate", "evaluation_config", "load_weights", "mean_return"]


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
    run_dir, checkpoint = run_dir_of(run_dir, None)
    config = evaluation_config(load_config(run_dir), run_dir)
    checkpoint_path, saved = read_run_checkpoint(run_dir if checkpoint is None else checkpoint)
    spaces = probe_spaces(config)
    if env is not None and env != config["env"]:
        trained = config["env"]
        config = {**config, "env": env}
        _check_same_spaces(spaces, probe_spaces(config), trained, env)
    eval_env_kwargs = env_kwargs(config)
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
    with settings_of(run_dir / "params.json"):
        agent = make_agent(config, spaces, deterministic)
    # One environment, episodes one after another: with several at once, the first episodes to
    # end (the short ones) would fill the count before the long ones finish.
    sampler = SerialSampler(
        EnvCls=make_env,
        env_kwargs=env_kwargs(config),
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
            f"{first_line(error)}; were the files mixed up?"
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
