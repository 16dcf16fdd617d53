"""``OnPolicyRunner``: rsl_rl's runner calls (``learn``, ``save``, ``load``,
``get_inference_policy``) on ``MinibatchRl``'s loop, rows and checkpoints.

``learn(n)`` runs ``n`` more iterations with the loop that ``MinibatchRl.train`` runs
(``MinibatchRl._iterate``), so rows, snapshots and checkpoints are the same; the sampler
stays up between calls until ``close()``.
"""

from __future__ import annotations

import copy
import io
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rl_arrays import buffer_to, torchify_buffer

from ._checkpointer import read_checkpoint
from ._console import ProgBarCounter
from ._logger import logger
from ._minibatch_rl import MinibatchRl
from ._protocols import AgentProtocol, AlgoProtocol, SamplerProtocol
from ._values import positive_int

__all__ = ["DeployedPolicy", "OnPolicyRunner"]

# What MinibatchRl's runner_state holds, which this runner restores.
_RUNNER_STATE_KEYS = (
    "seed",
    "n_itr",
    "cum_time",
    "cum_updates_counted",
    "last_update_counter",
    "traj_keys",
    "progress_rows",
    "traj_window",
)


class DeployedPolicy:
    """The trained policy for deployment: ``policy(observation) -> action`` for a batch.

    Calls the agent's inference module (a copy of it, on ``device``, in eval mode, its
    parameters frozen) without gradient tracking; observations (torch tensors, numpy arrays,
    or namedarraytuples of them), and any further arguments the module takes (e.g. a
    recurrent policy's previous reward), are moved to ``device`` first.  ``reset(...)``
    calls the module's ``reset`` (a recurrent policy's state; nothing for a feed-forward
    one); ``module`` is the ``torch.nn.Module`` itself, e.g. for ``torch.jit`` or ONNX
    export.
    """

    def __init__(self, module: torch.nn.Module, device: torch.device | None = None):
        self.module = module
        self.device = _module_device(module) if device is None else torch.device(device)

    def __call__(self, observation: Any, *args: Any) -> Any:
        with torch.no_grad():
            inputs = [torchify_buffer(x) for x in (observation, *args)]
            if self.device is not None:
                inputs = [x if x is None else buffer_to(x, self.device) for x in inputs]
            return self.module(*inputs)

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """The module's ``reset`` (e.g. ``reset(env_mask)``), if it has one."""
        reset = getattr(self.module, "reset", None)
        if callable(reset):
            reset(*args, **kwargs)


def _module_device(module: torch.nn.Module) -> torch.device | None:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return None


def _check_infos(infos: Any) -> None:
    """``infos`` must come back from ``torch.load(weights_only=True)``: try it in memory."""
    buffer = io.BytesIO()
    try:
        torch.save(infos, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception as e:
        raise TypeError(
            "save(): infos must load with torch.load(weights_only=True), i.e. hold only None, "
            "bool, int, float, str, tensors, and lists, tuples and dicts of them "
            f"(convert numpy values with .item() or torch.as_tensor): {e}"
        ) from e


class OnPolicyRunner(MinibatchRl):
    """A runner for users of rsl_rl's ``OnPolicyRunner``: train in ``learn(num_iterations)``
    calls, ``save`` / ``load`` checkpoints, and ``get_inference_policy`` to deploy.

    Built like ``MinibatchRl``, except that ``n_steps`` is optional: it is the run's planned
    length, over which the algorithm's schedules run and which ``learn()`` completes.
    Without it the algorithm is told the first ``learn`` call's iterations, and learning past
    them logs a warning; for open-ended training use schedules that need no end. The first of
    ``learn``, ``save`` and ``get_inference_policy`` does the startup. Every ``learn`` ends
    with its work logged, so a ``save`` after it continues exactly; an error or Ctrl-C in it
    closes the runner. Rows, snapshots and rsl_rl's ``save_interval``: the package README,
    "OnPolicyRunner".
    """

    _n_steps_optional = True
    _continue_hint = "a new runner's load() continues from the last snapshot"

    def __init__(
        self,
        algo: AlgoProtocol,
        agent: AgentProtocol,
        sampler: SamplerProtocol,
        n_steps: int | float | None = None,
        seed: int | None = None,
        affinity: Mapping[str, Any] | None = None,
        log_interval_steps: int | float = 1e5,
        log_traj_window: int = 100,
        checkpoint_replay: bool = False,
    ):
        super().__init__(
            algo,
            agent,
            sampler,
            n_steps,
            seed=seed,
            affinity=affinity,
            log_interval_steps=log_interval_steps,
            checkpoint_replay=checkpoint_replay,
            log_traj_window=log_traj_window,
        )
        self._seed_given = seed is not None
        self._started = False  # startup done
        self._closed = False  # shut down (or closed before any startup)
        self._pending_load: tuple[Any, ...] | None = None  # a load() to apply at startup
        self._planned_itrs: int | None = None  # n_itr for the algorithm when n_steps is None
        self._paused_at: float | None = None  # when the last learn() returned
        self._warned_past_n_itr = False

    # ------------------------------------------------------------ state
    @property
    def current_learning_iteration(self) -> int:
        """Iterations done so far (rsl_rl's name): the next ``learn`` starts there."""
        if self._pending_load is not None:
            return int(self._pending_load[1]["next_itr"])
        return self._done_itrs()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> OnPolicyRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- startup
    def get_n_itr(self) -> int:
        """The iterations the algorithm is initialized with: ``n_steps`` in sampler
        batches (rounded up to whole log intervals), else the planned ones (see the
        class)."""
        if self.n_itr == 0:  # no n_steps
            self.n_itr = self._planned_itrs or 1
        logger.log(f"The algorithm is initialized for {self.n_itr} iterations.")
        return self.n_itr

    def _startup(self) -> None:
        pending, self._pending_load = self._pending_load, None
        self._start(pending)
        self._started = True

    def _ensure_started(self) -> None:
        if self._started:
            return
        self._check_open()
        with self._shutdown_guard(always=False):
            self._startup()
        self._paused_at = time.time()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"this {type(self).__name__} is closed (its sampler is shut down); build a new "
                "runner and load() a checkpoint to go on"
            )

    def shutdown(self) -> None:
        self._closed = True
        super().shutdown()

    def close(self) -> None:
        """Shut the sampler down (once; later calls do nothing).  The runner can still
        ``save`` and give its inference policy, but not ``learn`` or ``load``."""
        if self._closed:
            return
        if not self._started:  # nothing was started
            self._closed = True
            return
        self.shutdown()

    # --------------------------------------------------------- learning
    def learn(self, num_iterations: int | None = None) -> None:
        """Run ``num_iterations`` more iterations (None: up to ``n_steps``), continuing
        from where the last call (or a loaded checkpoint) stopped; see the class."""
        self._check_open()
        if num_iterations is None:
            if self.n_steps is None:
                raise ValueError("learn() needs num_iterations: this runner has no n_steps")
            num_iterations = self.n_itr - self.current_learning_iteration
            if num_iterations < 1:
                raise ValueError(
                    f"learn(): the n_steps={self.n_steps} of this runner are done "
                    f"({self.current_learning_iteration} iterations); pass num_iterations "
                    "to go on"
                )
        n = positive_int("num_iterations", num_iterations)
        with self._shutdown_guard(always=False):
            if not self._started:
                if self._planned_itrs is None:
                    self._planned_itrs = n
                self._startup()
            else:
                self._resume_clock()
                logger.debug(f"Optimizing over {self.log_interval_itrs} iterations.")
                assert self.progress is not None
                self.progress.pbar = ProgBarCounter(self.log_interval_itrs)
            progress = self.progress
            assert progress is not None  # (made at startup)
            stop = progress.next_itr + n
            if stop > self.n_itr and not self._warned_past_n_itr:
                self._warned_past_n_itr = True
                logger.log(
                    f"WARNING: learning up to iteration {stop}, past the n_itr={self.n_itr} "
                    "the algorithm was initialized with: its schedules over n_itr (e.g. PPO's "
                    "linear_lr_schedule) have ended there. Give the runner n_steps for the "
                    "whole run to have them span it."
                )
            self._iterate(stop)
            if progress.next_itr > progress.last_log_next_itr:  # the last interval
                itr = progress.next_itr - 1
                logger.set_iteration(itr)
                with logger.prefix(f"itr #{itr} "):
                    self._log_interval(itr)
        self._paused_at = time.time()

    def _resume_clock(self) -> None:
        """Leave the time spent outside ``learn`` out of ``CumTime`` and the speeds."""
        if self._paused_at is not None:
            assert self.progress is not None  # (made at startup, before any pause)
            idle = time.time() - self._paused_at
            self.progress.start_time += idle
            self.progress.last_time += idle
            self._paused_at = None

    def train(self) -> None:
        """``MinibatchRl``'s call: ``learn()`` up to ``n_steps``, then ``close()``."""
        try:
            self.learn()
        finally:
            self.close()

    def resume(self, path: str | os.PathLike) -> None:
        """``MinibatchRl``'s call: ``load(path)``, then ``train()``."""
        self.load(path)
        self.train()

    # ------------------------------------------------------ checkpoints
    def get_itr_snapshot(self, itr: int) -> dict[str, Any]:
        snapshot = super().get_itr_snapshot(itr)
        if self._closed:  # the environments are gone: no sampler state to keep
            snapshot["sampler_state"] = False
        return snapshot

    def save(self, path: str | os.PathLike, infos: Any = None) -> Path:
        """Write a checkpoint to ``path`` (its folder is created if needed): what a snapshot
        of ``MinibatchRl`` holds (agent state with its normalisation statistics, optimizer
        state, counters, random generators, runner bookkeeping) and ``infos`` under the key
        ``"infos"``; with a sampler that has ``state_dict()``, its state is saved beside
        it as data (``<stem>_sampler_state-<id>.npz``), committed by the checkpoint file,
        written last (see ``Checkpointer``).  It loads
        with ``torch.load(path, weights_only=True)``: ``infos`` must hold plain values
        (checked before anything is written).  Returns ``path``."""
        _check_infos(infos)
        self._ensure_started()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.checkpointer.write(self, path, self._done_itrs() - 1, extra={"infos": infos})
        logger.log(f"Saved checkpoint {path} after {self._done_itrs()} iterations.")
        return path

    def load(self, path: str | os.PathLike, load_optimizer: bool = True) -> Any:
        """Restore a checkpoint of ``save`` or a snapshot of ``MinibatchRl`` (a file, or a
        run directory as ``resume`` takes it); returns its ``infos`` (None if it has none).

        Restores the agent, the optimizer (unless ``load_optimizer`` is False), the counters,
        the trajectory window, the random generators and the sampler's state when saved
        beside it, and drops the rows of the active ``progress.csv`` written after it. Before
        startup it is applied at startup. It must come from a runner with the same batch
        size and log interval that keeps a trajectory window; anything else is a ValueError,
        a missing file FileNotFoundError. Details: the package README, "OnPolicyRunner".
        """
        self._check_open()
        checkpoint_path, checkpoint = read_checkpoint(path)
        self.checkpointer.check(self, checkpoint, checkpoint_path, "load")
        state = checkpoint["runner_state"]
        missing = [key for key in _RUNNER_STATE_KEYS if key not in state]
        if missing:
            writer = checkpoint.get("runner", "a runner of another kind")
            raise ValueError(
                f"cannot load {str(checkpoint_path)!r}: it was written by {writer}, whose "
                f"runner state lacks {', '.join(missing)} ({type(self).__name__} loads "
                "checkpoints of OnPolicyRunner and MinibatchRl); to take its agent alone: "
                "agent.load_state_dict(rl_runners.load_checkpoint(path)['agent_state_dict'])"
            )
        sampler_state = self.checkpointer.saved_sampler_state(
            self, checkpoint, checkpoint_path, required=False
        )
        restore = (checkpoint_path, checkpoint, sampler_state, bool(load_optimizer))
        if self._started:
            self.checkpointer.restore(self, *restore)
            self._paused_at = time.time()
        else:
            if not self._seed_given:
                self.seed = state["seed"]
            if self.n_steps is None:
                self._planned_itrs = int(state["n_itr"])
            self._pending_load = restore
            logger.log(f"Loaded {checkpoint_path}: applied at startup.")
        return checkpoint.get("infos")

    # -------------------------------------------------------- deploying
    def get_inference_policy(
        self, device: str | int | torch.device | None = None
    ) -> DeployedPolicy:
        """The trained policy for deployment (see ``DeployedPolicy``): a copy of the agent's
        ``inference_policy()`` module (see ``InferenceAgentProtocol``) moved to ``device``
        (None: left where ``inference_policy()`` puts it, the CPU for rl_agents' agents), in
        eval mode, called without gradients: deterministic actions, observation
        normalisation included.  A copy: later training does not change it (ask again for
        the newer policy).  Does the startup if none was done yet (after ``load``, this
        gives the loaded policy).  TypeError if the agent has no ``inference_policy``."""
        make = getattr(self.agent, "inference_policy", None)
        if not callable(make):
            raise TypeError(
                f"agent ({type(self.agent).__name__}) has no inference_policy() method, which "
                "get_inference_policy needs; see rl_runners.InferenceAgentProtocol"
            )
        device = None if device is None else torch.device(device)
        self._ensure_started()
        module = make()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(
                f"{type(self.agent).__name__}.inference_policy() must return a "
                f"torch.nn.Module, got {type(module).__name__}"
            )
        module = copy.deepcopy(module)
        if device is not None:
            module.to(device)
        module.eval()
        module.requires_grad_(False)
        return DeployedPolicy(module, device)
