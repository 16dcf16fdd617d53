"""Training configurations: defaults, named presets, and ``--set key=value`` overrides.

A configuration is a nested dict of plain values (it is saved in the run's ``params.json``
under ``"config"``, and ``resume`` rebuilds the run from it). Keys are fixed: an override of a key that does not exist is
an error, except inside the ``*_kwargs`` dicts, whose keys are checked against the class they go
to when the run is built.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from ._presets import PRESET_ABOUT, PRESETS

__all__ = ["ALGOS", "PRESETS", "PRESET_ABOUT", "apply_overrides", "default_preset", "make_config"]

ALGOS = ("a2c", "ppo", "dqn", "catdqn", "r2d1", "ddpg", "td3", "sac")

DEFAULTS: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "env_kwargs": {},
    "steps": 100_000,
    "seed": 0,
    "device": "cpu",
    "torch_threads": None,  # the training process's torch threads; None: the runner's choice
    "log_to": [],  # outputs besides progress.csv: "tensorboard", "wandb", "mlflow"
    "sampler": {
        # serial | cpu | gpu | alternating (gpu's action server, the workers in two groups
        # that step while it acts for the other) | batched (torch:, vec: and ale: envs)
        "kind": "serial",
        "workers": None,  # cpu / gpu samplers: default one per core
        # cpu / gpu / alternating samplers: seconds a worker may go without answering before
        # the run stops with a line naming it (a dead worker stops it at once)
        "worker_timeout": 300.0,
        "batch_T": 32,
        "batch_B": 8,
        "max_decorrelation_steps": 0,
        # False: an environment whose episode ends waits for the batch's end to reset, so a
        # recurrent agent's training sequences never run across a reset (rlpyt's wait-reset).
        "mid_batch_reset": True,
        "eval_n_envs": 8,
        "eval_max_steps": 40_000,
        "eval_max_trajectories": 16,
    },
    # deterministic_eval: policy-gradient agents act greedily in evaluation (Q-learning
    # agents always do, but with probability agent_kwargs.eps_eval act at random).
    "agent": {"recurrent": False, "deterministic_eval": False, "model_kwargs": {}},
    "agent_kwargs": {},  # e.g. the Q-learning agents' eps_init, eps_final, eps_eval
    "algo_kwargs": {},
    # checkpoint_replay: the checkpoint also holds the replay buffer (replay algorithms), so
    # a resumed run goes on learning from the same data; it can be large (Atari: gigabytes).
    "runner": {
        "log_interval_steps": 10_000,
        "evaluate": True,
        "snapshot_mode": "last",
        "checkpoint_replay": False,
        # stop_return: training ends after the first evaluation whose mean return reaches it
        "stop_return": None,
        # processes > 1: that many copies of sampler, agent and algorithm train together
        # (SyncRl: gradients all-reduced; each samples its own batch, so an iteration covers
        # processes x batch_T x batch_B steps); on GPUs, one each from `device` on
        "processes": 1,
        # asynchronous: (replay algorithms) the sampler in its own process, the optimizer
        # here, paced to the replay ratio (AsyncRl)
        "asynchronous": False,
    },
}

# PPO on CartPole (rl-baselines3-zoo's tuned values; recurrent or not): 20 epochs of one
# minibatch per batch, linear schedules.
MUJOCO_LOCOMOTION = ("HalfCheetah", "Hopper", "Walker2d", "Ant")


def default_preset(algo: str, env: str) -> str | None:
    """The preset made for ``algo`` on ``env`` (any Atari game for the Atari ones, any
    MuJoCo locomotion task for the MuJoCo ones), if any: what ``train`` uses when no preset
    is named."""
    for name, preset in PRESETS.items():
        special = "observation_indices" in preset.get("env_kwargs", {}) or preset.get(
            "agent", {}
        ).get("recurrent")
        if preset["algo"] != algo or special:
            continue
        if _env_family(preset["env"]) == _env_family(env):
            return name
    return None


def is_atari(env: str) -> bool:
    return env.startswith(("atari:", "ALE/"))


def is_batched(env: str) -> bool:
    """A batched environment (``BatchedSampler``): ``torch:<name>``, ``vec:<gymnasium id>``
    or ``ale:<game>`` (Atari on ale-py's vector env)."""
    return env.startswith(("torch:", "vec:", "ale:"))


def _env_family(env: str) -> str:
    """What a preset's environment stands for: every Atari game, every MuJoCo locomotion
    task, every batched environment, or just itself."""
    if is_atari(env):
        return "atari"
    if env.startswith("ale:"):
        return "ale"
    if is_batched(env):
        return "batched"
    if env.partition("-")[0] in MUJOCO_LOCOMOTION:
        return "mujoco-locomotion"
    return env


def merge_config(base: dict[str, Any], changes: dict[str, Any], path: str = "") -> None:
    """Deep update of ``base`` with ``changes``; unknown keys are refused except in dicts
    whose name ends in ``_kwargs`` (they go to a constructor, which checks them)."""
    for key, value in changes.items():
        where = f"{path}{key}"
        open_dict = path.rstrip(".").endswith("_kwargs")
        if key not in base and not open_dict:
            raise KeyError(f"unknown setting {where!r}; known here: {', '.join(sorted(base))}")
        if isinstance(base.get(key), dict) and not key.endswith("_kwargs"):
            if not isinstance(value, dict):
                raise ValueError(f"{where} is a group of settings, not a value")
            merge_config(base[key], value, f"{where}.")
        elif isinstance(base.get(key), dict) and isinstance(value, dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = copy.deepcopy(value)


def make_config(preset: str | None = None, **changes: Any) -> dict[str, Any]:
    """The defaults, updated by ``preset`` then by ``changes`` (None values are skipped)."""
    config = copy.deepcopy(DEFAULTS)
    if preset is not None:
        if preset not in PRESETS:
            raise KeyError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        merge_config(config, PRESETS[preset])
    merge_config(config, {k: v for k, v in changes.items() if v is not None})
    if config["algo"] not in ALGOS:
        raise KeyError(f"unknown algorithm {config['algo']!r}; algorithms: {', '.join(ALGOS)}")
    return config


JSON_WORDS = {"true": True, "false": False, "null": None}


def parse_value(text: str) -> Any:
    """A Python literal when it is one (numbers, lists, True, None ...), JSON's true, false
    and null as well, else the text."""
    if text in JSON_WORDS:
        return JSON_WORDS[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_overrides(config: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """``["sampler.batch_B=16", "algo_kwargs.learning_rate=3e-4"]`` applied to ``config``."""
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes key=value, got {assignment!r}")
        change: Any = parse_value(text)
        for part in reversed(key.split(".")):
            change = {part: change}
        merge_config(config, change)
    return config
