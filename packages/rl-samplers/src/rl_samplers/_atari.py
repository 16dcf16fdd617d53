"""Atari 2600 games on the Arcade Learning Environment (ale-py), without gymnasium in between.

``AtariEnv`` drives ``ale_py.ALEInterface`` directly and does the classic preprocessing
itself, in preallocated buffers: frame skip, a max over the last two frames (Atari games
flicker), grayscale, downsampling, a stack of the last frames, reward clipping, a life
loss as the end of an episode, random no-ops at the start and a step limit.

ale-py and opencv-python are the ``[atari]`` extra; they are imported when the first
``AtariEnv`` is built, so ``rl_samplers`` imports without them.
"""

from __future__ import annotations

import difflib
import functools
import re
from types import ModuleType
from typing import Any

import numpy as np

from rl_arrays import EnvStep, as_count, namedarraytuple

from ._env import Env
from ._env_state import load_state, state_of
from ._spaces import IntBox
from ._traj_info import TrajInfo

__all__ = ["AtariEnv", "AtariTrajInfo"]

EnvInfo = namedarraytuple("EnvInfo", ["game_score", "traj_done", "timeout"])
EnvInfo.__doc__ = (
    "What ``AtariEnv.step`` reports besides the reward: ``game_score`` the raw (unclipped) "
    "reward, ``traj_done`` whether the game is over or timed out (a life loss alone ends "
    "the RL episode, ``done``, but not the trajectory), ``timeout`` whether the step limit "
    "ended it (bootstrap through it)."
)

_INSTALL_HINT = "pip install rl-samplers[atari]"


def _import_atari_deps() -> tuple[ModuleType, ModuleType]:
    """``(ale_py, cv2)``, or an ImportError that says how to install them."""
    try:
        import ale_py
        import cv2
    except ImportError as err:
        missing = err.name or "ale-py / opencv-python"
        raise ImportError(
            f"AtariEnv needs ale-py and opencv-python, and {missing} is missing: {_INSTALL_HINT}"
        ) from err
    return ale_py, cv2


@functools.lru_cache(maxsize=1)
def _rom_ids() -> tuple[str, ...]:
    """The snake_case names of every ROM the installed ale-py ships."""
    ale_py, _ = _import_atari_deps()
    return tuple(sorted(ale_py.roms.get_all_rom_ids()))


def _name_key(name: str) -> str:
    """``"SpaceInvaders"``, ``"space_invaders"``, ``"ALE/SpaceInvaders-v5"`` -> ``"spaceinvaders"``."""
    name = re.sub(r"^ALE/", "", name.strip(), flags=re.IGNORECASE)
    name = re.sub(r"(NoFrameskip|Deterministic)?(-v\d+)?$", "", name)
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _is_supported(ale_py: ModuleType, rom_id: str) -> bool:
    """Whether ALE can run the ROM.  ale-py ships a few ROMs it has no game logic for
    (combat, joust, maze_craze, warlords in 0.12: ALE issue #537), and loading one of those
    ends the whole process, so they are refused before."""
    is_supported = getattr(ale_py.ALEInterface, "isSupportedROM", None)
    if is_supported is None:  # older ale-py: no way to ask, try it
        return True
    rom_path = ale_py.roms.get_rom_path(rom_id)
    return rom_path is not None and bool(is_supported(str(rom_path)))


@functools.lru_cache(maxsize=1)
def _supported_rom_ids() -> tuple[str, ...]:
    ale_py, _ = _import_atari_deps()
    return tuple(rom_id for rom_id in _rom_ids() if _is_supported(ale_py, rom_id))


@functools.lru_cache(maxsize=1)
def _rom_id_by_key() -> dict[str, str]:
    return {_name_key(rom_id): rom_id for rom_id in _rom_ids()}


def resolve_game(game: str) -> str:
    """The ROM id (snake_case, as ale-py names it) of a game given in snake_case, CamelCase
    or as a gymnasium id; ValueError naming close matches for an unknown game."""
    if not isinstance(game, str):
        raise TypeError(f"game must be a str such as 'pong', got {type(game).__name__}")
    by_key = _rom_id_by_key()
    rom_id = by_key.get(_name_key(game))
    supported = _supported_rom_ids()
    if rom_id in supported:
        return rom_id
    if rom_id is not None:
        raise ValueError(
            f"game {game!r}: ale-py ships its ROM, but this ALE cannot run it (no game "
            "implementation; ALE issue #537); AtariEnv.available_games() lists those it can"
        )
    supported_keys = [_name_key(rom_id) for rom_id in supported]
    close = difflib.get_close_matches(_name_key(game), supported_keys, n=5, cutoff=0.6)
    hint = f"close matches: {', '.join(by_key[k] for k in close)}" if close else "no close match"
    raise ValueError(
        f"game {game!r} is not an Atari game ale-py ships ({hint}; "
        f"AtariEnv.available_games() lists all {len(supported)})"
    )


def _camel_name(rom_id: str) -> str:
    """``"space_invaders"`` -> ``"SpaceInvaders"`` (the other spelling ``game`` accepts)."""
    return "".join(part[:1].upper() + part[1:] for part in rom_id.split("_"))


def _check_int(name: str, value: object, minimum: int) -> int:
    return as_count(name, value, minimum, expected=f"an int >= {minimum}")  # 27e3 too


class AtariEnv(Env):
    """An Atari game on ALE with the classic DQN preprocessing, done fast.

    ``game``: e.g. "pong", "SpaceInvaders", "ALE/MsPacman-v5" (``available_games()``);
    ``frame_skip``: frames per step, rewards summed, newest frame the max of the last two;
    ``num_img_obs``: frames per uint8 observation ``(num_img_obs, *obs_size)``, oldest first;
    ``clip_reward``: sign of the raw reward, kept as ``env_info.game_score``;
    ``episodic_lives``: a life loss is ``done`` but not ``env_info.traj_done``;
    ``fire_on_reset`` (Breakout); ``max_start_noops``: random idle frames on a full reset;
    ``repeat_action_probability``: ALE's sticky actions, per frame; ``horizon``: steps per
    game, then ``done``, ``traj_done`` and ``timeout``; ``obs_size``: ``(104, 80)`` crops and
    halves the screen, other sizes resize it.  The README ("Atari") has the details.
    """

    def __init__(
        self,
        game: str = "pong",
        frame_skip: int = 4,
        num_img_obs: int = 4,
        clip_reward: bool = True,
        episodic_lives: bool = True,
        fire_on_reset: bool = False,
        max_start_noops: int = 30,
        repeat_action_probability: float = 0.0,
        horizon: int | None = 27000,
        obs_size: tuple[int, int] = (104, 80),
        seed: int | None = None,
    ):
        self._game = resolve_game(game)
        self._frame_skip = _check_int("frame_skip", frame_skip, 1)
        num_img_obs = _check_int("num_img_obs", num_img_obs, 1)
        self._max_start_noops = _check_int("max_start_noops", max_start_noops, 0)
        self._horizon = None if horizon is None else _check_int("horizon", horizon, 1)
        rap = float(repeat_action_probability)
        if not 0.0 <= rap <= 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {rap!r}")
        try:
            height, width = (_check_int("obs_size", s, 1) for s in obs_size)
        except (TypeError, ValueError):
            raise ValueError(
                f"obs_size must be (height, width), two positive ints, got {obs_size!r}"
            ) from None
        self._clip_reward = bool(clip_reward)
        self._episodic_lives = bool(episodic_lives)
        self._fire_on_reset = bool(fire_on_reset)

        ale_py, cv2 = _import_atari_deps()
        self._cv2_resize = cv2.resize
        self._interpolation = cv2.INTER_AREA
        rom_path = ale_py.roms.get_rom_path(self._game)
        if rom_path is None:
            raise ValueError(f"ale-py has no ROM file for game {self._game!r}")
        self._rom_path = rom_path
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)  # no banner per env
        self._ale = ale_py.ALEInterface()
        self._ale.setFloat("repeat_action_probability", rap)
        self._ale.setInt("frame_skip", 1)  # frames are skipped here, one act() per frame
        self.seed(seed)
        self._load_rom()

        self._actions = tuple(self._ale.getMinimalActionSet())
        self._noop = ale_py.Action.NOOP
        self._fire = ale_py.Action.FIRE
        if self._fire_on_reset and self._fire not in self._actions:
            raise ValueError(
                f"fire_on_reset=True, but {self._game!r} has no FIRE action "
                f"(its actions: {', '.join(self.action_meanings)})"
            )
        self._action_space = IntBox(0, len(self._actions))
        self._action_space.seed(self._action_space_seed)
        self._observation_space = IntBox(0, 256, shape=(num_img_obs, height, width), dtype="uint8")

        screen_h, screen_w = self._ale.getScreenDims()
        # The last two raw frames (max-pooled against flicker) and their max.
        self._frames = np.zeros((2, screen_h, screen_w), np.uint8)
        self._latest = 0  # which of self._frames holds the newest frame
        self._max_frame = np.zeros((screen_h, screen_w), np.uint8)
        if (height, width) == ((screen_h - 2) // 2, screen_w // 2):
            self._resize_src = self._max_frame[1 : 1 + 2 * height]  # crop 2 rows, then 2x
        else:
            self._resize_src = self._max_frame
        self._dsize = (width, height)  # cv2 wants (width, height)
        # Frame history as a ring: self._ring[self._newest] is the newest frame.
        self._ring = np.zeros((num_img_obs, height, width), np.uint8)
        self._newest = num_img_obs - 1

        self._lives = 0
        self._steps = 0  # steps since the last full reset (the game's length so far)
        self._continue_game = False  # the last done was a life loss: don't restart

    # ---------------------------------------------------------------- public API

    @staticmethod
    def available_games() -> list[str]:
        """Every game name ``AtariEnv`` accepts: the ROMs ale-py ships and ALE can run,
        in snake_case."""
        return list(_supported_rom_ids())

    @property
    def game(self) -> str:
        """The game's snake_case name (ale-py's ROM id)."""
        return self._game

    @property
    def ale(self) -> Any:
        """The underlying ``ale_py.ALEInterface`` (for inspection; stepping it directly
        desynchronises the observation history)."""
        return self._ale

    @property
    def action_meanings(self) -> list[str]:
        """Names of the actions, by index: e.g. ``["NOOP", "FIRE", "RIGHT", "LEFT"]``."""
        return [a.name for a in self._actions]

    @property
    def lives(self) -> int:
        return self._ale.lives()

    @property
    def horizon(self) -> int | None:
        return self._horizon

    def seed(self, seed: int | None) -> None:
        """Seed ALE (sticky actions, the game's own randomness), the start no-ops and the
        action space.  ``None`` draws fresh entropy.

        ALE only takes a new ``random_seed`` when a ROM is loaded, so the next ``reset()``
        is a full one that re-loads the ROM (about 0.1 s): ``seed(s); reset()`` then
        replays exactly like a new ``AtariEnv(..., seed=s)``'s first ``reset()``.
        """
        ale_seq, noop_seq, action_seq = np.random.SeedSequence(seed).spawn(3)
        self._ale_seed = int(ale_seq.generate_state(1)[0] & 0x7FFFFFFF)
        self._rng = np.random.default_rng(noop_seq)
        self._action_space_seed = int(action_seq.generate_state(1)[0])
        if hasattr(self, "_action_space"):
            self._action_space.seed(self._action_space_seed)
        self._reload_rom = True
        self._continue_game = False

    def reset(self) -> np.ndarray:
        """Start a new episode; return its first observation.

        After a ``done`` that was only a life loss (``episodic_lives``, game not over) the
        game goes on where it was (one FIRE frame if ``fire_on_reset``, else one no-op
        frame); otherwise (first reset, game over, horizon, a new seed, or a reset in mid
        episode) the game restarts with random no-ops (and FIRE if ``fire_on_reset``).
        """
        ale = self._ale
        if self._continue_game:
            self._continue_game = False
            ale.act(self._fire if self._fire_on_reset else self._noop)
            if ale.game_over():
                self._full_reset()
        else:
            self._full_reset()
        self._lives = ale.lives()
        # Only one frame is known: it is both of the last two.
        ale.getScreenGrayscale(self._frames[self._latest])
        self._frames[1 - self._latest] = self._frames[self._latest]
        self._ring[:] = 0
        self._newest = self._ring.shape[0] - 1
        return self._observe_newest()

    def step(self, action: Any) -> EnvStep:
        a = int(action)
        if not 0 <= a < len(self._actions):
            raise ValueError(f"action must be in range({len(self._actions)}), got {action!r}")
        ale_action = self._actions[a]
        ale, frames, frame_skip = self._ale, self._frames, self._frame_skip
        grab_from = frame_skip - 2  # grab the last two frames for the max
        game_over = False
        score = 0  # the raw game reward of the step's frames
        for i in range(frame_skip):
            score += ale.act(ale_action)
            if ale.game_over():
                game_over = True
                break
            if i >= grab_from:
                self._latest ^= 1
                ale.getScreenGrayscale(frames[self._latest])
        if game_over:  # the final screen alone
            ale.getScreenGrayscale(frames[0])
            frames[1] = frames[0]
        observation = self._observe_newest()

        self._steps += 1
        lives = ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        timeout = not game_over and self._horizon is not None and self._steps >= self._horizon
        traj_done = game_over or timeout
        done = traj_done or (life_lost and self._episodic_lives)
        self._continue_game = done and not traj_done

        game_score = float(score)
        reward = float((score > 0) - (score < 0)) if self._clip_reward else game_score
        return EnvStep(observation, reward, done, EnvInfo(game_score, traj_done, timeout))

    def env_state(self) -> dict[str, Any]:
        """Where the game is, as data a checkpoint keeps: ALE's state with its random
        generator (as bytes) and this env's own frames and counters."""
        ale_state = self._ale.cloneState(include_rng=True).serialize()
        own = {k: v for k, v in vars(self).items() if k != "_ale"}
        return {"ale": np.frombuffer(ale_state, np.uint8).copy(), "own": state_of(own, "AtariEnv")}

    def load_env_state(self, state: dict[str, Any]) -> None:
        """Continue from ``env_state()`` of an env made with the same arguments."""
        ale_py, _ = _import_atari_deps()
        own = {k: v for k, v in vars(self).items() if k != "_ale"}
        vars(self).update(load_state(own, state["own"], "AtariEnv"))
        self._ale.restoreState(ale_py.ALEState(np.asarray(state["ale"], np.uint8).tobytes()))

    def close(self) -> None:
        """Free the emulator; the env cannot be used afterwards."""
        self._ale = None

    def __repr__(self) -> str:
        return (
            f"AtariEnv(game={self._game!r} ({_camel_name(self._game)}), "
            f"actions={len(self._actions)}, obs={self._observation_space.shape})"
        )

    # ---------------------------------------------------------------- internals

    def _load_rom(self) -> None:
        self._ale.setInt("random_seed", self._ale_seed)
        self._ale.loadROM(str(self._rom_path))  # also resets the game
        self._reload_rom = False
        self._fresh_game = True

    def _full_reset(self) -> None:
        ale = self._ale
        if self._reload_rom:
            self._load_rom()
        if not self._fresh_game:
            ale.reset_game()
        self._fresh_game = False
        if self._max_start_noops:
            for _ in range(int(self._rng.integers(0, self._max_start_noops + 1))):
                ale.act(self._noop)
                if ale.game_over():
                    ale.reset_game()
        if self._fire_on_reset:
            ale.act(self._fire)
            if ale.game_over():
                ale.reset_game()
        self._steps = 0

    def _observe_newest(self) -> np.ndarray:
        """Downsample the max of the last two frames into the ring; return the history
        (a fresh array, oldest to newest)."""
        frames = self._frames
        np.maximum(frames[0], frames[1], out=self._max_frame)
        ring = self._ring
        k = ring.shape[0]
        newest = self._newest = (self._newest + 1) % k
        self._cv2_resize(
            self._resize_src, self._dsize, dst=ring[newest], interpolation=self._interpolation
        )
        observation = np.empty_like(ring)
        split = k - 1 - newest  # frames after `newest` in the ring are the older ones
        observation[:split] = ring[newest + 1 :]
        observation[split:] = ring[: newest + 1]
        return observation


class AtariTrajInfo(TrajInfo):
    """``TrajInfo`` plus ``GameScore``: the sum of raw (unclipped) game rewards.

    With ``episodic_lives`` a trajectory spans all lives of one game: ``Return`` sums the
    clipped rewards the agent learns from, ``GameScore`` the game's own score.
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.GameScore = 0.0

    def step(
        self,
        observation: Any,
        action: Any,
        reward: float,
        done: bool,
        agent_info: Any,
        env_info: Any,
    ) -> None:
        super().step(observation, action, reward, done, agent_info, env_info)
        self["GameScore"] += float(env_info.game_score)
