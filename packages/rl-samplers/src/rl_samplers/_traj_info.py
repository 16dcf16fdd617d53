"""Per-episode statistics the samplers accumulate and hand to the logger."""

from __future__ import annotations

from typing import Any

from rl_arrays import AttrDict

__all__ = ["TrajInfo"]


class TrajInfo(AttrDict):
    """Length, return, discounted return and non-zero reward count of one episode.

    Subclass it to record what an environment adds (see ``AtariTrajInfo``).  Fields whose
    names start with ``_`` are bookkeeping, not logged.  The discount is the class
    attribute ``_discount``, set by the sampler from ``traj_info_kwargs`` (in every process
    that makes trajectory infos: see ``set_traj_info_kwargs``).
    """

    _discount = 1.0

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.Length = 0
        self.Return = 0.0
        self.NonzeroRewards = 0
        self.DiscountedReturn = 0.0
        self._cur_discount = 1.0

    def step(
        self,
        observation: Any,
        action: Any,
        reward: float,
        done: bool,
        agent_info: Any,
        env_info: Any,
    ) -> None:
        """Account for one step of the episode.  (Item access, not attributes: this runs
        every step, and AttrDict's attribute hooks are Python calls.)"""
        reward = float(reward)
        self["Length"] += 1
        self["Return"] += reward
        self["NonzeroRewards"] += reward != 0
        self["DiscountedReturn"] += self["_cur_discount"] * reward
        self["_cur_discount"] *= type(self)._discount

    def terminate(self, observation: Any) -> TrajInfo:
        """The finished episode's record."""
        return self


def set_traj_info_kwargs(
    TrajInfoCls: type[TrajInfo], traj_info_kwargs: dict[str, Any] | None
) -> None:
    """Give ``TrajInfoCls`` the class attributes ``_<key>`` (e.g. ``_discount``). Class
    attributes do not travel with a class to a spawned or forkserver process, which imports
    it afresh: each process that steps environments calls this itself."""
    for key, value in (traj_info_kwargs or {}).items():
        setattr(TrajInfoCls, "_" + key, value)
