"""Environments by id, as the trainer makes them: gymnasium ids through ``rl_samplers.make``,
Atari games (``atari:pong`` or ``ALE/Pong-v5``) through ``AtariEnv`` directly; batched ones
for ``BatchedSampler`` (``make_batch_env``): ``torch:cartpole`` / ``torch:pendulum`` (the
torch envs, on the run's device), ``vec:<gymnasium id>`` (``gymnasium.make_vec``) and
``ale:<game>`` (ale-py's vector env, as ``AleVectorEnv``: ``atari:<game>``'s frames).

``make_env`` is a module-level function, so samplers can start workers with any start method.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any, cast

import gymnasium
import numpy as np

from rl_arrays import EnvSpaces
from rl_samplers import (
    AleVectorEnv,
    AtariEnv,
    BatchEnv,
    GymEnvWrapper,
    GymSpaceWrapper,
    InfoActionMask,
    TorchCartPole,
    TorchPendulum,
    make,
)

from ._config import is_atari, is_batched

__all__ = [
    "atari_game",
    "batch_env_spaces",
    "is_atari",
    "is_batched",
    "make_batch_env",
    "make_env",
    "single_env_id",
]

# The torch envs by name (torch:<name>), and the gymnasium envs they follow step for step.
TORCH_ENVS: dict[str, Callable[..., BatchEnv]] = {
    "cartpole": TorchCartPole,
    "pendulum": TorchPendulum,
}
TORCH_ENV_GYM_IDS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}


def atari_game(env_id: str) -> str:
    """``atari:pong`` -> ``pong``; ``ALE/SpaceInvaders-v5`` -> ``space_invaders``."""
    if env_id.startswith("atari:"):
        return env_id.removeprefix("atari:")
    name = env_id.removeprefix("ALE/").split("-")[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class _KeepIndices(gymnasium.ObservationWrapper):
    """Keep only some entries of a flat Box observation (e.g. hide velocities)."""

    def __init__(self, env: gymnasium.Env, indices: list[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"observation_indices needs a flat Box observation, got {space}")
        bad = [i for i in indices if not -space.shape[0] <= i < space.shape[0]]
        if bad or not indices:
            raise ValueError(
                f"observation_indices must name entries of the {space.shape[0]} observation "
                f"entries, got {indices}"
            )
        self.indices = np.asarray(indices)
        self.observation_space = gymnasium.spaces.Box(
            space.low[self.indices], space.high[self.indices], dtype=space.dtype
        )

    def observation(self, observation: Any) -> Any:
        return observation[self.indices]


class _ClipAction(gymnasium.ActionWrapper):
    """Clip Box actions into the action space (keeping the space, unlike gymnasium's
    ``ClipAction``, so the agent still sees the bounds)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise ValueError(f"clip_action needs a Box action space, got {space}")
        self.low, self.high = space.low, space.high

    def action(self, action: Any) -> Any:
        return np.clip(action, self.low, self.high)


def make_env(
    id: str,
    observation_indices: list[int] | None = None,
    clip_action: bool = False,
    action_mask_from_info: bool = False,
    video_dir: str | None = None,
    video_episodes: int | None = None,
    **kwargs: Any,
) -> Any:
    """Our ``Env`` for ``id``; ``observation_indices`` keeps only those observation entries
    (CartPole with ``[0, 2]`` sees positions but no velocities: a task that needs memory);
    ``clip_action`` clips actions into the Box action space before the environment sees them
    (as SB3 does for a Gaussian policy; the agent learns from the action it drew);
    ``video_dir`` records each of the first ``video_episodes`` episodes (all when None) into
    an MP4 file there (gymnasium's ``RecordVideo``: ``pip install 'rl-suite[video]'``);
    ``action_mask_from_info`` moves ``info["action_mask"]`` into a ``Dict`` observation,
    where agents mask their actions with it (``InfoActionMask``)."""
    if is_atari(id):
        if any((observation_indices is not None, clip_action, action_mask_from_info, video_dir)):
            raise ValueError(
                "observation_indices, clip_action, action_mask_from_info and video recording "
                "apply to gymnasium environments only, not to Atari (AtariEnv)"
            )
        return AtariEnv(game=atari_game(id), **kwargs)
    if video_dir is not None:
        kwargs["render_mode"] = "rgb_array"
        if not has_display():  # (MuJoCo renders off screen through EGL then)
            os.environ.setdefault("MUJOCO_GL", "egl")
    env = make(id, **kwargs)
    inner = env.env
    if observation_indices is not None:
        inner = _KeepIndices(inner, list(observation_indices))
    if clip_action:
        inner = _ClipAction(inner)
    if action_mask_from_info:
        inner = InfoActionMask(inner)
    if video_dir is not None:
        inner = _recorded(inner, video_dir, video_episodes, name=id.replace(":", "-"))
    return env if inner is env.env else GymEnvWrapper(inner)


def has_display() -> bool:
    """Whether windows can be shown: an X or Wayland display on Linux; assumed elsewhere."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _recorded(env: gymnasium.Env, video_dir: str, episodes: int | None, name: str) -> gymnasium.Env:
    """``env`` recording episodes into ``<video_dir>/<name>-episode-<n>.mp4``."""
    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401  (RecordVideo asks for it)
    except ImportError as error:
        raise ImportError(
            f"recording videos needs {error.name}: pip install 'rl-suite[video]'"
        ) from error
    return _RecordVideo(
        env,
        video_dir,
        episode_trigger=lambda episode: episodes is None or episode < episodes,
        name_prefix=name,  # (RecordVideo appends "-episode-<n>")
        disable_logger=True,
    )


class _RecordVideo(gymnasium.wrappers.RecordVideo):
    """gymnasium's ``RecordVideo``, its frames encoded by imageio-ffmpeg (H.264): its own
    encoder, moviepy, drops an episode's last frame (``int(len / fps * fps)`` rounds down)."""

    def stop_recording(self) -> None:
        if self.recorded_frames:
            path = os.path.join(self.video_folder, f"{self._video_name}.mp4")
            write_mp4(path, cast(list[np.ndarray], self.recorded_frames), self.frames_per_sec)
        self.recorded_frames = []  # (the rest of the base's bookkeeping, without its encoder)
        self.recording = False
        self._video_name = None


def write_mp4(path: str, frames: list[np.ndarray], fps: float) -> None:
    """RGB ``frames`` ``[H, W, 3]`` as an H.264 MP4 that players take (yuv420p)."""
    import imageio_ffmpeg

    height, width = frames[0].shape[:2]
    writer = imageio_ffmpeg.write_frames(
        path,
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_out="yuv420p",
        macro_block_size=2,  # (yuv420p needs even sizes: an odd one is scaled by a pixel)
        ffmpeg_log_level="error",
    )
    writer.send(None)  # (starts ffmpeg)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
    writer.close()


def make_batch_env(num_envs: int, id: str, device: str = "cpu", **kwargs: Any) -> Any:
    """``num_envs`` envs of a batched ``id``, as ``BatchedSampler`` steps them: a torch env on
    ``device`` (kwargs: its own, e.g. ``max_episode_steps``, ``critic_observation``), Atari
    games on ale-py's vector env, their frames on ``device`` (kwargs: ``AtariEnv``'s, and
    ``vector_kwargs``, e.g. ``num_threads``, which a single ``AtariEnv`` has not), or a
    gymnasium vector env in the same-step autoreset mode (kwargs go to ``gymnasium.make_vec``,
    ``vectorization_mode`` "sync" by default; ``device`` is not used: it steps numpy)."""
    kind, _, name = id.partition(":")
    if kind == "torch":
        if name not in TORCH_ENVS:
            known = ", ".join(f"torch:{n}" for n in TORCH_ENVS)
            raise ValueError(f"unknown torch environment {id!r}; there are {known}")
        return TORCH_ENVS[name](num_envs, device=device, **kwargs)
    if kind == "ale" and name:
        vector_kwargs = kwargs.pop("vector_kwargs", {})
        return AleVectorEnv(name, num_envs, device=device, **kwargs, **vector_kwargs)
    if kind != "vec" or not name:
        raise ValueError(
            "a batched environment id is torch:<name>, vec:<gymnasium id> or ale:<game>, "
            f"got {id!r}"
        )
    vector_kwargs = {
        "autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP,
        **kwargs.pop("vector_kwargs", {}),
    }
    mode = kwargs.pop("vectorization_mode", "sync")
    return gymnasium.make_vec(
        name, num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs, **kwargs
    )


def batch_env_spaces(env: Any) -> EnvSpaces:
    """The per-env spaces of what ``make_batch_env`` made."""
    if isinstance(env, gymnasium.vector.VectorEnv):
        return EnvSpaces(
            observation=GymSpaceWrapper(env.single_observation_space, name="obs"),
            action=GymSpaceWrapper(env.single_action_space, name="act"),
        )
    return env.spaces


def single_env_id(id: str) -> str:
    """The id whose single env behaves as one of the batched ``id``'s (what ``evaluate``
    plays): ``vec:<id>`` -> ``<id>``, ``torch:cartpole`` -> ``CartPole-v1``, ``ale:pong`` ->
    ``atari:pong``."""
    kind, _, name = id.partition(":")
    if kind == "ale":
        return f"atari:{name}"
    return TORCH_ENV_GYM_IDS[name] if kind == "torch" else name
