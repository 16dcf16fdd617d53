"""Advantage actor-critic (synchronous): one gradient step per batch of samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl_arrays import AgentInputs, valid_mean

from ._compile import compiled
from ._pg import OptInfo, PolicyGradientAlgo

__all__ = ["A2C"]


class A2C(PolicyGradientAlgo):
    """Advantage Actor-Critic: each ``optimize_agent`` takes one gradient step on the whole
    batch, with advantages from discounted returns (``gae_lambda=1``) or GAE.

    Loss: ``-mean(log_prob(action) * advantage) + value_loss_coeff * mean(0.5 * (value -
    return)^2) - entropy_loss_coeff * mean(entropy)``, every mean over the valid steps.
    """

    def __init__(
        self,
        discount: float = 0.99,
        learning_rate: float = 0.001,
        value_loss_coeff: float = 0.5,
        entropy_loss_coeff: float = 0.01,
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 1.0,
        initial_optim_state_dict: dict[str, Any] | None = None,
        gae_lambda: float = 1,
        normalize_advantage: bool = False,
        compile: bool | dict[str, Any] = False,
        normalize_reward: bool = False,
        reward_clip: float = 10.0,
    ):
        super().__init__(
            discount=discount,
            learning_rate=learning_rate,
            value_loss_coeff=value_loss_coeff,
            entropy_loss_coeff=entropy_loss_coeff,
            OptimCls=OptimCls,
            optim_kwargs=optim_kwargs,
            clip_grad_norm=clip_grad_norm,
            initial_optim_state_dict=initial_optim_state_dict,
            gae_lambda=gae_lambda,
            normalize_advantage=normalize_advantage,
            compile=compile,
            normalize_reward=normalize_reward,
            reward_clip=reward_clip,
        )

    def optimize_agent(self, itr: int, samples: Any) -> OptInfo:
        """One gradient step on ``samples``; returns an OptInfo of one-element lists (with
        ``compile``, tensors left on the device)."""
        samples = self._prepare(samples)
        outputs = self._steps(None, samples, self.process_returns(samples))
        self.update_counter += 1
        if self._compile_options is not None:
            return OptInfo(*(output.reshape(1) for output in outputs))
        loss, grad_norm, entropy, perplexity = torch.stack(outputs).tolist()  # one read
        return OptInfo(
            loss=[loss], gradNorm=[grad_norm], entropy=[entropy], perplexity=[perplexity]
        )

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._loss_fn = compiled(self._loss, options, self._agent.recurrent)

    def _update_step(self, variant: Any, *inputs: Any) -> tuple[Any, ...]:
        """The gradient step on a batch on the device: ``(loss, grad norm, entropy,
        perplexity)``."""
        samples, returns = inputs
        self._optimizer.zero_grad()
        loss, entropy, perplexity = self._loss_fn(samples, returns)
        loss.backward()
        return loss.detach(), self._clip_and_step(), entropy.detach(), perplexity

    def loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, entropy, perplexity)`` of the agent on ``samples`` (loss with grad).

        Feed-forward agents see the whole ``[T, B]`` batch; recurrent ones run each env's
        sequence from ``prev_rnn_state`` at its first step.
        """
        samples = self._to_device(samples)
        return self._loss(samples, self.process_returns(samples))

    def _loss(
        self, samples: Any, returns: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``loss`` given the batch's ``(return_, advantage, valid)``."""
        return_, advantage, valid = returns
        agent = self._agent
        agent_inputs = AgentInputs(
            samples.env.observation, samples.agent.prev_action, samples.env.prev_reward
        )
        init_rnn_state = self._init_rnn_state(samples, agent.recurrent)
        dist_info, value = self._forward(agent_inputs, init_rnn_state)
        dist = agent.distribution
        log_likelihood = dist.log_likelihood(samples.agent.action, dist_info)
        pi_loss = -valid_mean(log_likelihood * advantage, valid)
        value_loss = self.value_loss_coeff * valid_mean(0.5 * (value - return_) ** 2, valid)
        entropy, entropy_loss = self._entropy_bonus(dist, dist_info, valid)
        loss = pi_loss + value_loss + entropy_loss
        with torch.no_grad():
            perplexity = dist.mean_perplexity(dist_info, valid)
        return loss, entropy, perplexity
