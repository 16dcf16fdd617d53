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

__all__ = ["ALGOS", "PRESETS", "PRESET_ABOUT", "apply_overrides", "default_preset", "make_config"]

ALGOS = ("a2c", "ppo")

DEFAULTS: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "env_kwargs": {},
    "steps": 100_000,
    "seed": 0,
    "device": "cpu",
    "torch_threads": None,  # the training process's torch threads; None: torch's default
    "sampler": {
        "kind": "serial",  # serial | cpu | gpu
        "workers": None,  # cpu / gpu samplers: default one per core
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
    "agent": {"recurrent": False, "deterministic_eval": False, "model_kwargs": {}},
    "algo_kwargs": {},
    "runner": {"log_interval_steps": 10_000, "evaluate": True, "snapshot_mode": "last"},
}

# PPO on CartPole (rl-baselines3-zoo's tuned values; recurrent or not): 20 epochs of one
# minibatch per batch, linear schedules.
_CARTPOLE_PPO = {
    "discount": 0.98,
    "gae_lambda": 0.8,
    "learning_rate": 1e-3,
    "ratio_clip": 0.2,
    "epochs": 20,
    "minibatches": 1,
    "entropy_loss_coeff": 0.0,
    "value_loss_coeff": 0.5,
    "linear_lr_schedule": True,
}

# Each preset: the algorithm it is for, and what it changes in the defaults.
PRESETS: dict[str, dict[str, Any]] = {
    "cartpole": {
        "algo": "ppo",
        "env": "CartPole-v1",
        "steps": 100_000,
        "torch_threads": 1,  # small networks: a second thread costs more than it gives
        "algo_kwargs": _CARTPOLE_PPO,
    },
    "cartpole-a2c": {
        "algo": "a2c",
        "env": "CartPole-v1",
        "steps": 500_000,
        "torch_threads": 1,
        "sampler": {"batch_T": 5, "batch_B": 16},
        "runner": {"log_interval_steps": 25_000},
        "algo_kwargs": {
            "discount": 0.99,
            "learning_rate": 7e-4,
            "entropy_loss_coeff": 0.0,
            "value_loss_coeff": 0.5,
            "gae_lambda": 1.0,
            "normalize_advantage": False,
        },
    },
    "cartpole-masked-lstm": {
        "algo": "ppo",
        "env": "CartPole-v1",
        "env_kwargs": {"observation_indices": [0, 2]},  # positions only: velocities hidden
        "steps": 300_000,
        "torch_threads": 1,
        "agent": {"recurrent": True},
        # Wait-reset: a training sequence never runs across an episode's reset.
        "sampler": {"batch_T": 32, "batch_B": 8, "mid_batch_reset": False},
        "algo_kwargs": _CARTPOLE_PPO,
    },
    "inverted-pendulum": {
        "algo": "ppo",
        "env": "InvertedPendulum-v5",
        "steps": 150_000,
        "torch_threads": 1,
        "sampler": {"batch_T": 256, "batch_B": 8},
        "agent": {"model_kwargs": {"normalize_observation": True}},
        "runner": {"log_interval_steps": 20_000},
        "algo_kwargs": {
            "discount": 0.99,
            "gae_lambda": 0.95,
            "learning_rate": 3e-4,
            "ratio_clip": 0.2,
            "epochs": 10,
            "minibatches": 32,
            "entropy_loss_coeff": 0.0,
            "value_loss_coeff": 0.5,
            "linear_lr_schedule": True,
            "normalize_advantage": True,
        },
    },
    # The reference's Atari configurations: 104x80 frames, 4 of them, clipped rewards,
    # episodic lives, parallel workers.
    "atari": {
        "algo": "ppo",
        "env": "atari:pong",
        "steps": 10_000_000,
        "sampler": {"kind": "cpu", "batch_T": 128, "batch_B": 8, "max_decorrelation_steps": 1000},
        "runner": {"log_interval_steps": 100_000},
        "algo_kwargs": {
            "discount": 0.99,
            "gae_lambda": 0.95,
            "learning_rate": 1e-3,
            "ratio_clip": 0.1,
            "epochs": 4,
            "minibatches": 4,
            "entropy_loss_coeff": 0.01,
            "value_loss_coeff": 1.0,
            "linear_lr_schedule": True,
        },
    },
    "atari-a2c": {
        "algo": "a2c",
        "env": "atari:pong",
        "steps": 10_000_000,
        "sampler": {"kind": "cpu", "batch_T": 5, "batch_B": 16, "max_decorrelation_steps": 1000},
        "runner": {"log_interval_steps": 100_000},
        "algo_kwargs": {"discount": 0.99, "learning_rate": 7e-4, "entropy_loss_coeff": 0.01},
    },
}


PRESET_ABOUT = {
    "cartpole": "PPO on CartPole-v1, 8 envs x 32 steps, 20 epochs: 500 within 100k steps",
    "cartpole-a2c": "A2C on CartPole-v1, 16 envs x 5 steps, 500k steps",
    "cartpole-masked-lstm": "recurrent PPO on CartPole-v1 seeing positions only (needs memory)",
    "inverted-pendulum": "Gaussian PPO on MuJoCo InvertedPendulum-v5, normalised observations",
    "atari": "PPO on Atari (atari:<game>), the reference's configuration, CPU workers",
    "atari-a2c": "A2C on Atari (atari:<game>), the reference's configuration, CPU workers",
}
assert PRESET_ABOUT.keys() == PRESETS.keys()


def default_preset(algo: str, env: str) -> str | None:
    """The preset made for ``algo`` on ``env`` (any Atari game for the Atari ones), if any:
    what ``train`` uses when no preset is named."""
    for name, preset in PRESETS.items():
        special = preset.get("env_kwargs") or preset.get("agent", {}).get("recurrent")
        if preset["algo"] != algo or special:
            continue
        if preset["env"] == env or (preset["env"].startswith("atari:") and _is_atari(env)):
            return name
    return None


def _is_atari(env: str) -> bool:
    return env.startswith(("atari:", "ALE/"))


def _merge(base: dict[str, Any], changes: dict[str, Any], path: str = "") -> None:
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
            _merge(base[key], value, f"{where}.")
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
        _merge(config, PRESETS[preset])
    _merge(config, {k: v for k, v in changes.items() if v is not None})
    if config["algo"] not in ALGOS:
        raise KeyError(f"unknown algorithm {config['algo']!r}; algorithms: {', '.join(ALGOS)}")
    return config


def _parse_value(text: str) -> Any:
    """A Python literal when it is one (numbers, lists, True, None ...), else the text."""
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
        change: Any = _parse_value(text)
        for part in reversed(key.split(".")):
            change = {part: change}
        _merge(config, change)
    return config
