"""Label smoothing (chapter 07).

Label smoothing (Szegedy et al. 2016 §7; Vaswani et al. 2017 §5.4, epsilon = 0.1) trains
against a target distribution ``q`` that moves ``smoothing`` of the probability mass off the
true class. The loss is the cross-entropy ``H(q, p) = -sum_k q_k log p_k`` with
``log p = log_softmax(logits)``. The KL divergence ``KL(q || p) = H(q, p) - H(q)`` differs from
it by the entropy of ``q``, a constant of the data, so both give the same gradients; the
cross-entropy's floor is ``H(q) > 0``, not 0, which is why a smoothed loss never reaches zero.

Where the removed mass goes, three conventions (:data:`SMOOTHING_CONVENTIONS`), for a
vocabulary of ``V`` classes and smoothing ``eps``:

- ``uniform``: ``eps / V`` on every class, the true one included, which gets
  ``1 - eps + eps / V``. Szegedy et al.'s ``(1 - eps) * onehot + eps * u(k)``, and what
  ``F.cross_entropy(label_smoothing=eps)`` computes.
- ``others``: ``1 - eps`` on the true class, ``eps / (V - 1)`` on each other class.
- ``others_no_pad``: ``1 - eps`` on the true class, 0 on the padding class, ``eps / (V - 2)`` on
  the rest. The Annotated Transformer's ``LabelSmoothing``; it needs the pad id.

Positions whose target is the ignored (padding) id get an all-zero ``q`` and add nothing.
Terms with ``q_k = 0`` count as 0 even where ``log p_k = -inf`` (``0 log 0 := 0``), so the loss
never takes ``log(0)`` the way The Annotated Transformer's demo does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SMOOTHING_CONVENTIONS = ("uniform", "others", "others_no_pad")
REDUCTION_CHOICES = ("mean", "sum", "none")


def _check_smoothing(smoothing: float, convention: str, pad_id: int | None) -> None:
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if convention not in SMOOTHING_CONVENTIONS:
        raise ValueError(
            f"convention={convention!r} is not one of: {', '.join(SMOOTHING_CONVENTIONS)}"
        )
    if convention == "others_no_pad" and (pad_id is None or pad_id < 0):
        raise ValueError(
            f"convention='others_no_pad' needs the pad id as a class index >= 0 "
            f"(ignore_index / pad_id), got {pad_id}"
        )


def _check_target(target: Tensor, vocab_size: int, pad_id: int | None) -> None:
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise TypeError(f"target must hold integer class ids, got dtype {target.dtype}")
    kept = target if pad_id is None else target[target != pad_id]
    if kept.numel() == 0:
        return
    # One host sync per call: an index out of range would otherwise fail deep inside scatter,
    # or on a GPU as an unreadable device-side assert.
    lowest, highest = kept.min().item(), kept.max().item()
    if lowest < 0 or highest >= vocab_size:
        bad = lowest if lowest < 0 else highest
        raise ValueError(
            f"target contains class {bad}, outside [0, {vocab_size}) for vocab_size={vocab_size}"
            + (f" (ignore_index={pad_id})" if pad_id is not None else "")
        )


def smoothing_values(
    vocab_size: int, smoothing: float, convention: str = "uniform", pad_id: int | None = None
) -> tuple[float, float]:
    """``(on, off)``: the mass ``q`` puts on the true class and on each other class that takes
    any (every class but the true one, and but the pad class under ``others_no_pad``)."""
    _check_smoothing(smoothing, convention, pad_id)
    minimum_size = 3 if convention == "others_no_pad" else 2
    if vocab_size < minimum_size:
        raise ValueError(
            f"convention={convention!r} needs vocab_size >= {minimum_size}, got {vocab_size}"
        )
    if convention == "others_no_pad" and pad_id >= vocab_size:
        raise ValueError(f"pad_id={pad_id} is not a class of vocab_size={vocab_size}")
    if convention == "uniform":
        off_value = smoothing / vocab_size
        return 1.0 - smoothing + off_value, off_value
    if convention == "others":
        return 1.0 - smoothing, smoothing / (vocab_size - 1)
    # others_no_pad: the pad column takes no mass, so V - 2 classes share eps
    return 1.0 - smoothing, smoothing / (vocab_size - 2)


def smoothed_targets(
    target: Tensor,
    vocab_size: int,
    smoothing: float,
    convention: str = "uniform",
    pad_id: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The smoothed target distribution ``q`` of every position.

    Args:
        target: integer class ids ``[...]``, e.g. ``[N]`` or ``[B, T]``.
        vocab_size: the number of classes ``V``.
        smoothing: ``eps`` in ``[0, 1)``.
        convention: one of :data:`SMOOTHING_CONVENTIONS` (see the module docstring).
        pad_id: the padding id. Positions whose target is ``pad_id`` get an all-zero row (they
            are ignored); under ``others_no_pad`` the ``pad_id`` column is 0 too. The loss
            passes its ``ignore_index``, which may lie outside ``[0, V)`` (torch uses -100).
        dtype: the floating dtype of the result.

    Returns:
        ``[..., V]``: each row sums to 1, or to 0 at ignored positions.
    """
    on_value, off_value = smoothing_values(vocab_size, smoothing, convention, pad_id)
    _check_target(target, vocab_size, pad_id)

    ignored = torch.zeros_like(target, dtype=torch.bool) if pad_id is None else target == pad_id
    # Ignored ids may be out of range (-100): give scatter a valid index, the row is zeroed below.
    index = target.long().masked_fill(ignored, 0)  # [...]
    distribution = torch.full(
        (*target.shape, vocab_size), off_value, dtype=dtype, device=target.device
    )  # [..., V]
    distribution.scatter_(-1, index.unsqueeze(-1), on_value)
    if convention == "others_no_pad":
        distribution[..., pad_id] = 0.0
    return distribution.masked_fill(ignored.unsqueeze(-1), 0.0)  # [..., V]


def _xlogx(value: float) -> float:
    return 0.0 if value == 0 else value * math.log(value)


def entropy(distribution: Tensor) -> Tensor:
    """``H(q) = -sum_k q_k log q_k`` over the last axis, with ``0 log 0 = 0``.

    Args:
        distribution: probabilities ``[..., V]``.

    Returns:
        ``[...]``; 0 for an all-zero (ignored) row.
    """
    return -torch.special.xlogy(distribution, distribution).sum(-1)  # [...]


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a label-smoothed target, from logits.

    With the default ``convention="uniform"`` it equals
    ``F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)``,
    with the classes on the last axis instead of axis 1.

    Args:
        smoothing: ``eps`` in ``[0, 1)``; 0 gives the plain cross-entropy.
        ignore_index: a target id that contributes nothing (padding); ``None`` ignores none.
        reduction: one of :data:`REDUCTION_CHOICES`. ``mean`` averages over the positions
            that are not ignored, as ``F.cross_entropy`` does. When every position is ignored
            ``mean`` gives 0.0 (with a zero gradient), where ``F.cross_entropy`` gives NaN, which
            an optimizer step would spread into every weight.
        convention: one of :data:`SMOOTHING_CONVENTIONS`; ``others_no_pad`` needs
            ``ignore_index`` to be the pad id.

    Shapes:
        logits ``[N, V]`` or ``[B, T, V]`` (any ``[..., V]``), target ``[N]`` or ``[B, T]``
        (the logits' shape without ``V``), any integer dtype. The result is a scalar, or the
        target's shape for ``reduction="none"`` (0 at ignored positions).
    """

    def __init__(
        self,
        smoothing: float,
        ignore_index: int | None = None,
        reduction: str = "mean",
        convention: str = "uniform",
    ) -> None:
        super().__init__()
        _check_smoothing(smoothing, convention, ignore_index)
        if reduction not in REDUCTION_CHOICES:
            raise ValueError(
                f"reduction={reduction!r} is not one of: {', '.join(REDUCTION_CHOICES)}"
            )
        self.smoothing = smoothing
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.convention = convention

    def extra_repr(self) -> str:
        return (
            f"smoothing={self.smoothing}, ignore_index={self.ignore_index}, "
            f"reduction={self.reduction!r}, convention={self.convention!r}"
        )

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        """The cross-entropy ``H(q, p)``, reduced."""
        cross_entropy, _ = self._per_position(logits, target)
        return self._reduce(cross_entropy, target)

    def kl_divergence(self, logits: Tensor, target: Tensor) -> Tensor:
        """``KL(q || p) = H(q, p) - H(q)``, reduced like the loss; >= 0 up to round-off.

        It equals ``F.kl_div(log_softmax(logits), q, reduction="sum")`` for ``reduction="sum"``.
        ``F.kl_div``'s ``batchmean`` divides by the number of rows, ignored ones included;
        ``mean`` here divides by the positions that are not ignored.
        """
        cross_entropy, target_entropy = self._per_position(logits, target)
        return self._reduce(cross_entropy - target_entropy, target)

    def _per_position(self, logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        if not logits.dtype.is_floating_point:
            raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
        if logits.dim() < 2 or logits.shape[:-1] != target.shape:
            raise ValueError(
                f"logits {list(logits.shape)} and target {list(target.shape)} disagree: logits "
                f"must be [..., V] with target's shape [...], e.g. [B, T, V] and [B, T]"
            )
        vocab_size, pad_id = logits.shape[-1], self.ignore_index
        on_value, off_value = smoothing_values(vocab_size, self.smoothing, self.convention, pad_id)
        _check_target(target, vocab_size, pad_id)
        log_probs = F.log_softmax(logits, dim=-1)  # [..., V]
        # H(q, p) = -sum_k q_k log p_k without building q ([..., V], as smoothed_targets does):
        # q is `off` on every class that takes mass and `on` on the true one, so the sum is
        # off * (sum of those log p_k) + (on - off) * log p_true. Same value, same gradient,
        # a fraction of the memory traffic (at V = 8000 the dense q cost more than the model).
        ignored = torch.zeros_like(target, dtype=torch.bool) if pad_id is None else target == pad_id
        index = target.long().masked_fill(ignored, 0)  # [...]
        true = log_probs.gather(-1, index.unsqueeze(-1)).squeeze(-1)  # [...]
        cross_entropy = -(on_value - off_value) * true  # [...]
        if off_value > 0:  # skipped at eps = 0: 0 * log p_k is 0 even where log p_k = -inf
            if self.convention == "others_no_pad":  # the pad column takes no mass
                total = log_probs[..., :pad_id].sum(-1) + log_probs[..., pad_id + 1 :].sum(-1)
            else:
                total = log_probs.sum(-1)  # [...]
            cross_entropy = cross_entropy - off_value * total
        others = vocab_size - (2 if self.convention == "others_no_pad" else 1)
        h_q = -(_xlogx(on_value) + others * _xlogx(off_value))  # H(q), the same at every position
        target_entropy = torch.full_like(cross_entropy, h_q)
        return cross_entropy.masked_fill(ignored, 0.0), target_entropy.masked_fill(ignored, 0.0)

    def _reduce(self, per_position: Tensor, target: Tensor) -> Tensor:
        if self.reduction == "none":
            return per_position  # [...]
        if self.reduction == "sum":
            return per_position.sum()
        if self.ignore_index is None:
            kept = torch.tensor(target.numel(), device=target.device)
        else:
            kept = (target != self.ignore_index).sum()
        # clamp: an all-ignored batch sums to 0 and divides by 1, not 0 / 0.
        return per_position.sum() / kept.clamp(min=1)
