"""Snapshots and resume, a part a runner is given (``MinibatchRl(..., checkpointer=...)``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import torch

from ._checkpoint import (
    companion_path,
    ctrl_c_deferred,
    find_checkpoint,
    load_data,
    save_data,
    save_torch,
)
from ._logger import logger
from ._progress import Progress
from ._protocols import AgentProtocol, AlgoProtocol, SamplerProtocol, missing_methods
from ._seed import get_rng_state, set_rng_state

__all__ = ["CHECKPOINT_FORMAT", "Checkpointer", "read_checkpoint"]

CHECKPOINT_FORMAT = 1


class CheckpointedRunner(Protocol):
    """What a ``Checkpointer`` reads and restores of a runner (``AsyncRl``'s parts, of the
    Async* protocols, have all that its snapshots read)."""

    algo: AlgoProtocol
    agent: AgentProtocol
    sampler: SamplerProtocol
    seed: int | None
    n_steps: int | None
    n_itr: int
    itr_batch_size: int
    log_interval_itrs: int
    progress: Progress | None  # (made at startup, before any snapshot or restore)

    def runner_state(self) -> dict[str, Any]: ...

    def get_itr_snapshot(self, itr: int) -> dict[str, Any]: ...


def read_checkpoint(path: str | os.PathLike) -> tuple[Path, Any]:
    """The checkpoint file ``path`` names (see ``find_checkpoint``) and its content, loaded
    onto the CPU with ``torch.load(weights_only=True)``; a file that is not one is a
    ValueError."""
    checkpoint_path = find_checkpoint(path)
    try:
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    except Exception as e:  # (pickle, zip and weights-only errors alike)
        raise ValueError(
            f"{str(checkpoint_path)!r} is not a checkpoint that torch.load(weights_only=True) "
            f"can read: {e}"
        ) from e
    return checkpoint_path, checkpoint


class ReplayAlgo(Protocol):
    """An algorithm whose replay buffer snapshots keep (``Checkpointer(replay=True)``)."""

    def save_replay(self, path: Path) -> None: ...

    def load_replay(self, path: Path) -> None: ...


class StatefulSampler(Protocol):
    """A sampler whose environments' state snapshots keep beside them."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> object: ...


def _progress(runner: CheckpointedRunner) -> Progress:
    assert runner.progress is not None, "the runner has not started"
    return runner.progress


COMPANIONS = ("replay", "sampler_state")


def _companion(checkpoint: Path, kind: str, snapshot_id: str) -> Path:
    """A snapshot's file of ``kind`` (``replay``, ``sampler_state``): named after the
    snapshot, so never paired with another one."""
    return companion_path(checkpoint, f"{kind}-{snapshot_id}")


def _remove_other_companions(checkpoint: Path, snapshot_id: str) -> None:
    """Delete the companion files beside ``checkpoint`` of snapshots other than
    ``snapshot_id``: an older one's, or those of one killed before its commit."""
    for kind in COMPANIONS:
        for file in checkpoint.parent.glob(_companion(checkpoint, kind, "*").name):
            if file != _companion(checkpoint, kind, snapshot_id):
                file.unlink(missing_ok=True)


class Checkpointer:
    """Writes a runner's snapshots and restores them (see the README's "Checkpoints").

    A snapshot is the checkpoint file (``params.pt`` or ``itr_<n>.pt``: tensors and plain
    values) and the files it names beside it: the sampler's state (``sampler_state-<id>.npz``,
    arrays and JSON) and, with ``replay``, the algorithm's replay buffer (its
    ``save_replay(path)`` / ``load_replay(path)``, ``replay-<id>.npz``). Each is written
    whole and renamed into place, the checkpoint file last: it commits the snapshot, and the
    previous one's files are removed only after it.
    """

    def __init__(self, replay: bool = False):
        self.replay = bool(replay)
        self._unsaved_warned = False

    def check_algo(self, algo: object) -> None:
        if self.replay and missing_methods(ReplayAlgo, algo):
            raise TypeError(
                f"checkpoint_replay needs an algorithm with save_replay and load_replay; "
                f"{type(algo).__name__} has no replay buffer to keep"
            )

    # --------------------------------------------------------------- writing
    def snapshot(self, runner: CheckpointedRunner, itr: int) -> dict[str, Any]:
        """Everything needed to continue after iteration ``itr`` (tensors, lists and
        numbers only: it loads with ``torch.load(weights_only=True)``)."""
        progress = _progress(runner)
        return {
            "format": CHECKPOINT_FORMAT,
            "runner": type(runner).__name__,
            "itr": itr,
            "next_itr": progress.next_itr,
            "cum_steps": progress.next_itr * runner.itr_batch_size,
            "cum_updates": progress.updates(),
            "cum_completed_trajs": progress.cum_completed_trajs,
            "agent_state_dict": runner.agent.state_dict(),
            "optimizer_state_dict": runner.algo.optim_state_dict(),
            "rng_state": get_rng_state(),
            "runner_state": runner.runner_state(),
            "sampler_state": hasattr(runner.sampler, "state_dict"),
        }

    def save(self, runner: CheckpointedRunner, itr: int, always: bool = False) -> Path | None:
        """The snapshot of ``itr``, if the logger's snapshot mode keeps one (``always``: in
        any mode but ``none``, e.g. when the run is stopped); returns its path."""
        path = logger.snapshot_path(itr, always)
        if path is None:
            return None
        self.write(runner, path, itr)
        logger.debug(f"Saved snapshot {path.name}.")
        return path

    def write(
        self,
        runner: CheckpointedRunner,
        path: Path,
        itr: int,
        extra: Mapping[str, Any] | None = None,
    ) -> list[Path]:
        """Write the snapshot of ``itr`` (with ``extra`` keys) as the checkpoint file
        ``path`` and its companions (see the class); returns the files, ``path`` last."""
        params = runner.get_itr_snapshot(itr)
        params.update(extra or {})
        params["snapshot_id"] = snapshot_id = uuid.uuid4().hex
        files = []
        with ctrl_c_deferred():
            if self.replay:
                replay_file = _companion(path, "replay", snapshot_id)
                cast(ReplayAlgo, runner.algo).save_replay(replay_file)  # (check_algo saw to it)
                params["replay_file"] = replay_file.name
                files.append(replay_file)
            state = self._sampler_state(runner) if params["sampler_state"] else None
            params["sampler_state"] = state is not None
            if state is not None:
                sampler_file = _companion(path, "sampler_state", snapshot_id)
                state = {"snapshot_id": snapshot_id, "next_itr": params["next_itr"], **state}
                save_data(state, sampler_file)
                params["sampler_file"] = sampler_file.name
                files.append(sampler_file)
            save_torch(params, path)  # the commit
            files.append(path)
        _remove_other_companions(path, snapshot_id)  # the previous snapshot's, now unused
        return files

    def _sampler_state(self, runner: CheckpointedRunner) -> dict[str, Any] | None:
        """The sampler's state as data; None, said once, when its environments' state cannot
        be written as data (a resume then restarts them)."""
        try:
            return {"state": cast(StatefulSampler, runner.sampler).state_dict()}
        except TypeError as e:  # (rl_samplers.UnsavedState among them)
            if not self._unsaved_warned:
                self._unsaved_warned = True
                logger.log(
                    f"WARNING: snapshots keep no environment state ({e}); a resume restarts "
                    "the environments."
                )
            return None

    # --------------------------------------------------------------- reading
    def for_resume(
        self, runner: CheckpointedRunner, path: str | os.PathLike
    ) -> tuple[Path, dict[str, Any], Any]:
        """Read and check the checkpoint ``path`` names, before any work: the arguments
        of ``restore``."""
        checkpoint_path, checkpoint = read_checkpoint(path)
        self.check(runner, checkpoint, checkpoint_path)
        state = checkpoint["runner_state"]
        if runner.seed is not None and runner.seed != state["seed"]:
            raise ValueError(
                f"cannot resume from {str(checkpoint_path)!r} with seed={runner.seed}: the run "
                f"used seed={state['seed']} (pass seed=None or the same seed)"
            )
        if checkpoint["next_itr"] > runner.n_itr:
            raise ValueError(
                f"cannot resume from {str(checkpoint_path)!r}: it is after iteration "
                f"{checkpoint['next_itr']}, beyond this runner's n_itr={runner.n_itr} "
                f"(n_steps={runner.n_steps})"
            )
        sampler_state = self.saved_sampler_state(runner, checkpoint, checkpoint_path)
        return checkpoint_path, checkpoint, sampler_state

    def check(
        self, runner: CheckpointedRunner, checkpoint: Any, path: Path, action: str = "resume from"
    ) -> None:
        """An rl_runners checkpoint of the runner's batch size and log interval, whose
        replay buffer (if it has one) is in place (``action``: what the errors name)."""
        if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{str(path)!r} is not an rl_runners checkpoint (format 1)")
        state = checkpoint["runner_state"]
        for key in ("itr_batch_size", "log_interval_itrs"):
            if state[key] != getattr(runner, key):
                raise ValueError(
                    f"cannot {action} {str(path)!r}: it was saved with {key}={state[key]}, "
                    f"this runner has {getattr(runner, key)}"
                )
        replay_name = checkpoint.get("replay_file")
        if replay_name is not None and not (path.parent / replay_name).is_file():
            raise FileNotFoundError(
                f"cannot {action} {str(path)!r}: its replay buffer {replay_name!r} is missing"
            )

    def saved_sampler_state(
        self,
        runner: CheckpointedRunner,
        checkpoint: dict[str, Any],
        path: Path,
        required: bool = True,
    ) -> Any:
        """The sampler's state saved beside ``path`` (None when there is none to load).
        A missing or mismatched file is an error when ``required``, else a warning."""
        if not hasattr(runner.sampler, "load_state_dict"):
            if checkpoint["sampler_state"]:
                logger.log(
                    "WARNING: the sampler has no load_state_dict(); its saved state "
                    "is not restored, so the environments start afresh."
                )
            return None
        if not checkpoint["sampler_state"]:
            logger.log("WARNING: the checkpoint holds no sampler state; environments start afresh.")
            return None
        if "sampler_file" not in checkpoint:  # (written before sampler states were data)
            logger.log(
                f"WARNING: {str(path)!r} keeps its sampler state as a pickle, which is not "
                "opened (unpickling a run's files can run code); the environments start afresh."
            )
            return None
        sampler_file = path.parent / checkpoint["sampler_file"]
        if not sampler_file.is_file():
            problem = f"its sampler state {str(sampler_file)!r} is missing"
            if required:
                raise FileNotFoundError(f"cannot resume from {str(path)!r}: {problem}")
            logger.log(f"WARNING: {problem}; the environments start afresh.")
            return None
        saved = load_data(sampler_file)
        if saved.get("snapshot_id") != checkpoint["snapshot_id"]:
            raise ValueError(f"{str(sampler_file)!r} does not belong to {str(path)!r}")
        return saved["state"]

    def restore(
        self,
        runner: CheckpointedRunner,
        path: Path,
        checkpoint: dict[str, Any],
        sampler_state: Any,
        load_optimizer: bool = True,
    ) -> None:
        """After startup: load the checkpoint's states (random generators last, since
        loading the others may draw from them; the optimizer's only if ``load_optimizer``)
        and drop later progress.csv rows."""
        algo = runner.algo
        _remove_other_companions(path, checkpoint["snapshot_id"])  # (a killed writer's)
        try:
            runner.agent.load_state_dict(checkpoint["agent_state_dict"])
            if load_optimizer:
                algo.load_optim_state_dict(checkpoint["optimizer_state_dict"])
        except (RuntimeError, KeyError, ValueError) as e:  # (missing or mis-shaped tensors)
            gist = " ".join(str(e).split())[:160] or type(e).__name__
            raise ValueError(
                f"{str(path)!r} does not fit this run's agent or optimizer ({gist}): was it "
                "written by another algorithm or model?"
            ) from e
        if hasattr(algo, "update_counter") and algo.update_counter is not None:
            algo.update_counter = checkpoint["cum_updates"]
        if sampler_state is not None:  # (the sampler has load_state_dict: see above)
            cast(StatefulSampler, runner.sampler).load_state_dict(sampler_state)
        replay_name = checkpoint.get("replay_file")
        if replay_name is not None:
            if hasattr(algo, "load_replay"):
                algo.load_replay(path.parent / replay_name)
            else:
                logger.log(
                    "WARNING: the checkpoint holds a replay buffer this algorithm can't take."
                )
        elif hasattr(algo, "load_replay"):
            logger.log(
                "WARNING: the checkpoint holds no replay buffer; replay starts empty, and "
                "learning waits until it holds min_steps_learn new steps (checkpoint_replay=True "
                "keeps the replay in snapshots)."
            )
        state, progress = checkpoint["runner_state"], _progress(runner)
        progress.load_state(checkpoint["next_itr"], checkpoint["cum_completed_trajs"], state)
        logger.truncate_tabular(state["progress_rows"])
        set_rng_state(checkpoint["rng_state"])
        logger.log(f"Resumed from {path} after {progress.next_itr} iterations.")
