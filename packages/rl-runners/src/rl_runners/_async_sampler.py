"""The asynchronous runner's sampler process: batches into the halves of the double buffer, as
far ahead of the optimizer as allowed, and (``AsyncRlEval``) its evaluations."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, cast

from rl_arrays import enter_child

from ._async_control import NEW_RUN, THROTTLE, Control, begin, report, wait_for
from ._evaluator import EvalSampler, Evaluator
from ._protocols import AsyncSamplerProtocol

__all__ = ["run_async_sampler"]


def run_async_sampler(
    sampler: AsyncSamplerProtocol,
    affinity: Mapping[str, Any],
    ctrl: Control,
    n_itr: int,
    main_pid: int,
    max_lead: int,
    eval_interval: int | None,
    min_itr_learn: int,
) -> None:
    """The sampler's process: from the first iteration the main process gives (0, or where
    a resumed run stopped) to ``n_itr``, batches into the halves of the double buffer in
    turn, each once the copier has freed it and the sampler is at most ``max_lead``
    iterations ahead of the optimizer; with ``eval_interval`` an evaluation before the first
    batch of a new run (not a resumed one) and after every ``eval_interval`` batches, once
    the optimizer has trained on them. A failure is sent to the main process, which raises
    it."""
    enter_child(main_pid)
    evaluating = cast(EvalSampler, sampler)  # (with eval_interval: checked at construction)
    try:
        sampler.initialize(affinity)
        try:
            start = begin(ctrl)
            if start is None:
                return
            if eval_interval is not None and ctrl.state[NEW_RUN]:
                _evaluate(evaluating, ctrl, 0, min_itr_learn)
            for itr in range(start, n_itr):
                if not wait_for(ctrl, lambda i=itr: i < ctrl.state[THROTTLE] + max_lead):
                    return
                db_idx = itr % 2
                if not ctrl.copied[db_idx].acquire(ctrl):
                    return
                traj_infos = list(sampler.obtain_samples(itr, db_idx))
                ctrl.sampler_end.send(("train", itr, traj_infos))
                ctrl.ready[db_idx].release()
                if eval_interval is not None and (itr + 1) % eval_interval == 0:
                    if not wait_for(ctrl, lambda i=itr: ctrl.state[THROTTLE] >= i + 1):
                        return
                    _evaluate(evaluating, ctrl, itr + 1, min_itr_learn)
        finally:
            sampler.shutdown()
    except Exception as error:
        report(ctrl.sampler_end, "sampler", error)
        sys.exit(1)  # (the main process raises it: not printed twice)


def _evaluate(sampler: EvalSampler, ctrl: Control, n_batches: int, min_itr_learn: int) -> None:
    """An evaluation after ``n_batches`` batches (skipped before the learning starts, as
    the ``Evaluator`` does), sent to the main process."""
    itr = max(n_batches - 1, 0)
    infos: list[Any] = []
    start = time.time()
    if not Evaluator.skips(itr, min_itr_learn):
        infos = list(sampler.evaluate_agent(itr))
    ctrl.sampler_end.send(("eval", n_batches, infos, time.time() - start))
