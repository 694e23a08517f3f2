"""Optimisers and learning-rate schedules (chapter 06).

Step numbering, the one convention of this module. Every schedule takes ``step``, the 1-based
number of the optimizer update the rate is for: ``step=1`` is the first ``optimizer.step()``.
This is the paper's ``step_num`` (Vaswani et al. 2017, §5.3). :func:`build_scheduler` follows
it: after ``k`` calls of ``scheduler.step()`` (one per update), the optimizer's learning rate is
``schedule(k + 1)``, the rate for the next update.

Why spell it out: :class:`torch.optim.lr_scheduler.LambdaLR` calls its lambda with
``last_epoch``, the number of ``scheduler.step()`` calls so far, which starts at 0. The
Annotated Transformer passes that straight to its ``rate`` and maps step 0 to step 1, so its
first two updates both use ``rate(1)`` and every later update runs one step behind the formula.
Call ``scheduler.step()`` once per optimizer update, not once per micro-batch under gradient
accumulation, or the schedule runs ``accumulation`` times too fast.

The schedules set absolute learning rates: :func:`build_scheduler` sets each parameter group's
base rate to 1.0, so LambdaLR's multiplier is the learning rate itself and the ``lr`` given to
:func:`build_optimizer` is replaced from the first update on.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

OPTIMIZER_CHOICES = ("adam", "adamw", "muon")
SCHEDULE_CHOICES = ("constant", "noam", "warmup_cosine")


def _check_step(step: int, caller: str) -> None:
    if step < 0:
        raise ValueError(f"{caller}: step must be >= 0, got {step}")


def constant_lr(step: int, *, lr: float) -> float:
    """The same learning rate ``lr`` at every step."""
    _check_step(step, "constant_lr")
    if lr < 0:
        raise ValueError(f"constant_lr: lr must be >= 0, got {lr}")
    return lr


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule (Vaswani et al. 2017, §5.3), times ``factor``.

    ``factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``: linear growth for
    ``warmup`` steps, then decay as ``1 / sqrt(step)``. The peak is at ``step == warmup`` and
    equals ``factor * (d_model * warmup)**-0.5``.

    Step 0 returns 0.0, the formula's limit as ``step -> 0`` (``step**-0.5`` would divide by
    zero). :func:`build_scheduler` never asks for it: its first update is step 1.
    """
    _check_step(step, "noam_lr")
    if d_model <= 0:
        raise ValueError(f"noam_lr: d_model must be > 0, got {d_model}")
    if warmup <= 0:
        raise ValueError(f"noam_lr: warmup must be > 0, got {warmup}")
    if factor <= 0:
        raise ValueError(f"noam_lr: factor must be > 0, got {factor}")
    if step == 0:
        return 0.0
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def warmup_cosine_lr(
    step: int, *, max_lr: float, warmup: int, total_steps: int, min_lr: float = 0.0
) -> float:
    """Linear warmup from 0 to ``max_lr``, then a half cosine down to ``min_lr``.

    ``step / warmup * max_lr`` for ``step <= warmup``; from ``warmup`` to ``total_steps`` the
    rate falls along ``min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2`` with
    ``progress`` going from 0 to 1; after ``total_steps`` it stays at ``min_lr``. With
    ``warmup=0`` the first update already runs at (almost) ``max_lr``.
    """
    _check_step(step, "warmup_cosine_lr")
    if warmup < 0:
        raise ValueError(f"warmup_cosine_lr: warmup must be >= 0, got {warmup}")
    if total_steps <= warmup:
        raise ValueError(
            f"warmup_cosine_lr: total_steps must be > warmup, got total_steps={total_steps}, "
            f"warmup={warmup}"
        )
    if not 0 <= min_lr <= max_lr:
        raise ValueError(
            f"warmup_cosine_lr: need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}"
        )
    if step < warmup:
        return max_lr * step / warmup
    if step >= total_steps:
        return min_lr
    progress = (step - warmup) / (total_steps - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def schedule_lr(name: str, step: int, **kwargs: Any) -> float:
    """The learning rate of schedule ``name`` (one of :data:`SCHEDULE_CHOICES`) at ``step``.

    ``kwargs`` are the schedule's own arguments, e.g.
    ``schedule_lr("noam", 4000, d_model=512, warmup=4000)``.
    """
    if name == "constant":
        return constant_lr(step, **kwargs)
    if name == "noam":
        return noam_lr(step, **kwargs)
    if name == "warmup_cosine":
        return warmup_cosine_lr(step, **kwargs)
    raise ValueError(f"schedule={name!r} is not one of: {', '.join(SCHEDULE_CHOICES)}")


class ScheduleMultiplier:
    """The ``lr_lambda`` that :func:`build_scheduler` gives LambdaLR.

    A callable object rather than a closure because LambdaLR's ``state_dict`` saves a callable
    object's ``__dict__`` but silently drops functions and lambdas. Its attributes are plain
    data (a name and numbers), so a checkpoint also loads with ``torch.load(weights_only=True)``.
    """

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        if name not in SCHEDULE_CHOICES:
            raise ValueError(f"schedule={name!r} is not one of: {', '.join(SCHEDULE_CHOICES)}")
        self.name = name
        self.kwargs = dict(kwargs)

    def __call__(self, scheduler_steps: int) -> float:
        # LambdaLR passes the number of scheduler.step() calls so far, i.e. updates done; the
        # rate it sets is for the next update, number scheduler_steps + 1.
        return schedule_lr(self.name, scheduler_steps + 1, **self.kwargs)

    def __repr__(self) -> str:
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.kwargs.items())
        return f"ScheduleMultiplier({self.name!r}, {arguments})"


def build_scheduler(optimizer: torch.optim.Optimizer, name: str, **kwargs: Any) -> LambdaLR:
    """A LambdaLR that sets the optimizer's learning rate to schedule ``name``.

    Args:
        optimizer: the optimizer to drive; every parameter group gets the same rate.
        name: one of :data:`SCHEDULE_CHOICES`.
        **kwargs: the schedule's arguments: ``lr`` for ``constant``; ``d_model``, ``warmup``,
            ``factor`` for ``noam``; ``max_lr``, ``warmup``, ``total_steps``, ``min_lr`` for
            ``warmup_cosine``.

    After ``k`` calls of ``scheduler.step()``, every group's ``lr`` equals
    ``schedule_lr(name, k + 1, **kwargs)`` (see the module docstring for why ``k + 1``). Save
    and restore both ``optimizer.state_dict()`` and ``scheduler.state_dict()``; the scheduler's
    state carries the schedule's arguments, so loading it also restores them.
    """
    multiplier = ScheduleMultiplier(name, kwargs)
    # Fail on missing or wrong schedule arguments before touching the optimizer.
    multiplier(0)
    for group in optimizer.param_groups:
        # LambdaLR multiplies each group's base rate ("initial_lr") by the lambda: with a base
        # of 1.0 the lambda's value is the learning rate itself, exactly.
        group["initial_lr"] = 1.0
    return LambdaLR(optimizer, lr_lambda=multiplier)


def set_schedule(scheduler: LambdaLR, name: str, **kwargs: Any) -> float:
    """Switch a scheduler from :func:`build_scheduler` to schedule ``name`` with ``kwargs``,
    keeping its step count; the optimizer's rate becomes the new schedule's for the next update,
    which it returns. A resumed run uses it to apply a changed ``lr`` (or schedule)."""
    multiplier = ScheduleMultiplier(name, kwargs)
    lr = multiplier(scheduler.last_epoch)  # fails on wrong arguments before changing anything
    scheduler.lr_lambdas = [multiplier] * len(scheduler.optimizer.param_groups)
    for group in scheduler.optimizer.param_groups:
        group["lr"] = lr
    return lr


def set_weight_decay(optimizer: torch.optim.Optimizer, weight_decay: float) -> None:
    """Set the decay of the decayed group of :func:`parameter_groups` (the ``ndim >= 2``
    parameters); the other group stays at 0."""
    if weight_decay < 0:
        raise ValueError(f"set_weight_decay: weight_decay must be >= 0, got {weight_decay}")
    for group in optimizer.param_groups:
        if any(parameter.ndim >= 2 for parameter in group["params"]):
            group["weight_decay"] = weight_decay


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split the trainable parameters into a decayed and a not-decayed group.

    The rule (nanoGPT's): a parameter with ``ndim >= 2`` is decayed (the weight matrices of
    linear layers, and embeddings), one with ``ndim < 2`` is not (biases, the gains and biases of
    LayerNorm/RMSNorm). Biases and gains are few and set offsets and scales, not interactions
    between inputs; pulling a gain towards 0 would shrink its layer's output, not regularise
    it. Embeddings are decayed because the paper ties the embedding
    to the pre-softmax linear layer (§3.4), and a tied matrix is both. The rule reads shapes,
    not module types, so it covers custom layers and tied weights (each parameter appears once).

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others,
        "weight_decay": 0.0}]``, leaving out a group that would be empty. Frozen parameters
        (``requires_grad=False``) are left out.
    """
    decayed = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    not_decayed = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": not_decayed, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def muon_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """``model``'s trainable parameters split for Muon: the weight matrices inside its stacks'
    layers (attention's ``qkv`` and ``out``, the feed-forward's two linear maps), and the rest
    (embeddings, the output projection, norms' gains, biases), which Muon's authors leave to
    AdamW: an embedding row is a lookup, not a map whose singular values Muon evens out."""
    hidden, others = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        inside = ".layers." in f".{name}"
        (hidden if inside and parameter.ndim == 2 else others).append(parameter)
    return hidden, others


class MuonAdamW(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024, ``torch.optim.Muon``: momentum, then the update's matrix
    orthogonalised by five Newton-Schulz steps) for the hidden weight matrices of
    :func:`muon_parameters`, AdamW for every other parameter: one optimizer to the trainer, its
    schedulers and its checkpoints.

    Muon's update is rescaled to the rms AdamW's would have (``adjust_lr_fn="match_rms_adamw"``,
    Liu et al. 2025), so one learning rate and one weight decay serve both halves and a schedule
    sets them alike: :attr:`param_groups` are the two inner optimizers' own groups.
    ``state_dict()`` holds both halves' state."""

    def __init__(
        self,
        model: nn.Module,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float],
        eps: float,
        momentum: float = 0.95,
    ) -> None:
        if not hasattr(torch.optim, "Muon"):
            raise ValueError(
                f"optimizer='muon' needs torch.optim.Muon (PyTorch 2.9 or newer); this is "
                f"PyTorch {torch.__version__}: upgrade it, or use optimizer=adamw"
            )
        hidden, others = muon_parameters(model)
        if not hidden:
            raise ValueError("optimizer='muon': the model has no weight matrix inside a layer")
        self.muon = torch.optim.Muon(
            hidden,
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            adjust_lr_fn="match_rms_adamw",
        )
        groups = [
            {"params": [p for p in others if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in others if p.ndim < 2], "weight_decay": 0.0},
        ]
        groups = [group for group in groups if group["params"]]
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in others)
        self.adamw = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)
        super().__init__(hidden + others, {"lr": lr})
        # the schedulers set the inner optimizers' own groups (the same dicts)
        self.param_groups = self.muon.param_groups + self.adamw.param_groups

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None if closure is None else closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        halves = {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}
        return {
            "state": {name: half["state"] for name, half in halves.items()},
            "param_groups": {name: half["param_groups"] for name, half in halves.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, half in (("muon", self.muon), ("adamw", self.adamw)):
            half.load_state_dict(
                {
                    "state": state_dict["state"][name],
                    "param_groups": state_dict["param_groups"][name],
                }
            )
        self.param_groups = self.muon.param_groups + self.adamw.param_groups


def build_optimizer(
    model: nn.Module,
    name: str = "adamw",
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
) -> torch.optim.Optimizer:
    """Adam or AdamW over :func:`parameter_groups` of ``model``, or Muon with AdamW
    (:class:`MuonAdamW`).

    Args:
        model: the module whose trainable parameters to optimise.
        name: one of :data:`OPTIMIZER_CHOICES`. ``adamw`` decays the weights directly
            (decoupled, Loshchilov & Hutter 2019); ``adam`` adds ``weight_decay * w`` to the
            gradient (L2), which Adam then rescales per parameter; ``muon``: Muon for the
            layers' weight matrices, AdamW for the rest.
        lr: the learning rate; a scheduler from :func:`build_scheduler` replaces it.
        weight_decay: for the ``ndim >= 2`` parameters. The paper used Adam without decay:
            ``build_optimizer(model, "adam", weight_decay=0.0)``.
        betas, eps: the paper's values (§5.3) by default, not torch's (0.9, 0.999) and 1e-8.

    The update runs as torch's fused kernel (``fused=True``: one pass over all parameters, 4-5x
    faster than the per-parameter loop on a CPU) wherever every parameter is a floating-point
    tensor on a CPU or CUDA device; the fused and the looped update agree to rounding.
    """
    if name not in OPTIMIZER_CHOICES:
        raise ValueError(f"optimizer={name!r} is not one of: {', '.join(OPTIMIZER_CHOICES)}")
    if weight_decay < 0:
        raise ValueError(f"build_optimizer: weight_decay must be >= 0, got {weight_decay}")
    if name == "muon":
        return MuonAdamW(model, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    groups = parameter_groups(model, weight_decay)
    optimizer_class = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    parameters = [p for group in groups for p in group["params"]]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
    return optimizer_class(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)
