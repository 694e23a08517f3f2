import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.losses import (
    REDUCTION_CHOICES,
    SMOOTHING_CONVENTIONS,
    LabelSmoothingLoss,
    entropy,
    smoothed_targets,
)

VOCAB_SIZE = 7
PAD = 0


def make_batch(shape: tuple[int, ...], seed: int = 0, pad_fraction: float = 0.3):
    """float64 logits ``[*shape, V]`` and targets ``[*shape]`` with some PAD positions."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*shape, VOCAB_SIZE, generator=generator, dtype=torch.float64)
    target = torch.randint(1, VOCAB_SIZE, shape, generator=generator)
    target[torch.rand(shape, generator=generator) < pad_fraction] = PAD
    return logits, target


def torch_cross_entropy(logits, target, **options):
    """F.cross_entropy with the classes moved from the last axis to axis 1, where it wants them."""
    return F.cross_entropy(logits.movedim(-1, 1), target, **options)


# ---------------------------------------------------------------------------------------------
# The default convention against torch


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3, 0.9])
@pytest.mark.parametrize("ignore_index", [None, PAD])
@pytest.mark.parametrize("shape", [(13,), (3, 5)])
@pytest.mark.parametrize("reduction", REDUCTION_CHOICES)
def test_matches_torch_cross_entropy_label_smoothing(smoothing, ignore_index, shape, reduction):
    logits, target = make_batch(shape)
    loss = LabelSmoothingLoss(smoothing, ignore_index, reduction)(logits, target)
    options = {"label_smoothing": smoothing, "reduction": reduction}
    if ignore_index is not None:
        options["ignore_index"] = ignore_index
    expected = torch_cross_entropy(logits, target, **options)
    assert loss.shape == expected.shape
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
def test_gradient_matches_torch_cross_entropy(smoothing):
    logits, target = make_batch((4, 6), seed=1)
    ours = logits.clone().requires_grad_(True)
    theirs = logits.clone().requires_grad_(True)
    LabelSmoothingLoss(smoothing, ignore_index=PAD)(ours, target).backward()
    torch_cross_entropy(theirs, target, label_smoothing=smoothing, ignore_index=PAD).backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)


def test_accepts_torch_default_ignore_index_and_int32_targets():
    logits, target = make_batch((10,), seed=2)
    target[::3] = -100
    loss = LabelSmoothingLoss(0.1, ignore_index=-100)(logits, target.to(torch.int32))
    expected = F.cross_entropy(logits, target, label_smoothing=0.1)  # torch ignores -100
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The other conventions against independent references


def reference_distribution(target, smoothing, convention, pad):
    """``q`` written out one entry at a time, straight from the definitions."""
    rows = []
    for true_class in target.tolist():
        row = []
        for k in range(VOCAB_SIZE):
            if true_class == pad:
                row.append(0.0)
            elif convention == "uniform":
                row.append(smoothing / VOCAB_SIZE + (1 - smoothing if k == true_class else 0.0))
            elif convention == "others":
                row.append(1 - smoothing if k == true_class else smoothing / (VOCAB_SIZE - 1))
            elif k == true_class:
                row.append(1 - smoothing)
            else:
                row.append(0.0 if k == pad else smoothing / (VOCAB_SIZE - 2))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_smoothed_targets_match_the_definitions(convention, smoothing):
    _, target = make_batch((12,), seed=3)
    distribution = smoothed_targets(
        target, VOCAB_SIZE, smoothing, convention, pad_id=PAD, dtype=torch.float64
    )
    expected = reference_distribution(target, smoothing, convention, PAD)
    torch.testing.assert_close(distribution, expected, rtol=1e-15, atol=1e-15)
    row_sums = distribution.sum(-1)
    torch.testing.assert_close(row_sums, (target != PAD).double(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
@pytest.mark.parametrize("reduction", REDUCTION_CHOICES)
def test_loss_is_the_cross_entropy_against_the_reference_distribution(convention, reduction):
    logits, target = make_batch((3, 4), seed=4)
    loss = LabelSmoothingLoss(0.2, PAD, reduction, convention)(logits, target)
    q = reference_distribution(target.flatten(), 0.2, convention, PAD).view(3, 4, VOCAB_SIZE)
    per_position = -(q * F.log_softmax(logits, -1)).sum(-1)  # [B, T]
    expected = {
        "none": per_position,
        "sum": per_position.sum(),
        "mean": per_position.sum() / (target != PAD).sum(),
    }[reduction]
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_and_gradient_equal_the_dense_smoothed_targets(convention, smoothing):
    """The loss never builds q ([..., V]); it equals the dense form of chapter 07, gradient too."""
    logits, target = make_batch((3, 5), seed=7)
    dense_logits = logits.clone().requires_grad_()
    logits.requires_grad_()
    loss = LabelSmoothingLoss(smoothing, PAD, "mean", convention)(logits, target)
    q = smoothed_targets(target, VOCAB_SIZE, smoothing, convention, PAD, dtype=torch.float64)
    per_position = -(q * F.log_softmax(dense_logits, -1)).sum(-1)  # [B, T]
    expected = per_position.sum() / (target != PAD).sum()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(logits.grad, dense_logits.grad, rtol=1e-12, atol=1e-12)


def test_others_equals_torch_uniform_with_rescaled_smoothing():
    # eps / (V - 1) off the true class is torch's eps' / V with eps' = eps * V / (V - 1).
    logits, target = make_batch((20,), seed=5)
    loss = LabelSmoothingLoss(0.3, PAD, convention="others")(logits, target)
    rescaled = 0.3 * VOCAB_SIZE / (VOCAB_SIZE - 1)
    expected = F.cross_entropy(logits, target, label_smoothing=rescaled, ignore_index=PAD)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


def test_others_no_pad_kl_matches_the_annotated_transformer():
    # The Annotated Transformer's LabelSmoothing: fill eps / (V - 2), scatter 1 - eps, zero the
    # pad column and the pad rows, then KLDivLoss(reduction="sum") on log-probabilities.
    logits, target = make_batch((15,), seed=6)
    true_distribution = torch.full_like(logits, 0.1 / (VOCAB_SIZE - 2))
    true_distribution.scatter_(1, target.unsqueeze(1), 1 - 0.1)
    true_distribution[:, PAD] = 0
    true_distribution[target == PAD] = 0
    expected = F.kl_div(F.log_softmax(logits, -1), true_distribution, reduction="sum")
    criterion = LabelSmoothingLoss(0.1, PAD, "sum", convention="others_no_pad")
    torch.testing.assert_close(
        criterion.kl_divergence(logits, target), expected, rtol=1e-12, atol=1e-12
    )


# ---------------------------------------------------------------------------------------------
# KL divergence and entropy


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
def test_kl_is_cross_entropy_minus_target_entropy_and_matches_torch_kl_div(convention):
    logits, target = make_batch((5, 4), seed=7)
    criterion = LabelSmoothingLoss(0.1, PAD, "none", convention)
    kl = criterion.kl_divergence(logits, target)  # [B, T]
    q = smoothed_targets(target, VOCAB_SIZE, 0.1, convention, PAD, dtype=torch.float64)
    torch.testing.assert_close(kl, criterion(logits, target) - entropy(q), rtol=0, atol=1e-12)
    expected = F.kl_div(F.log_softmax(logits, -1), q, reduction="none").sum(-1)
    torch.testing.assert_close(kl, expected, rtol=1e-12, atol=1e-12)
    assert (kl >= 0).all()


def test_kl_is_zero_when_the_model_predicts_the_smoothed_target():
    target = torch.tensor([1, 4, 2])
    q = smoothed_targets(target, VOCAB_SIZE, 0.2, "others", dtype=torch.float64)
    criterion = LabelSmoothingLoss(0.2, convention="others")
    kl = criterion.kl_divergence(q.log(), target)
    torch.testing.assert_close(kl, torch.zeros((), dtype=torch.float64), rtol=0, atol=1e-12)
    # ... and then the loss sits at its floor, the target's entropy, not at 0.
    torch.testing.assert_close(criterion(q.log(), target), entropy(q).mean())


def test_entropy_counts_zero_probabilities_as_zero():
    distribution = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(entropy(distribution), torch.tensor([0.6931472, 0.0, 0.0]))


# ---------------------------------------------------------------------------------------------
# Numerical safety


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_finite_loss_and_gradient_with_extreme_logits(convention, smoothing):
    target = torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    logits = torch.full((2, 3, VOCAB_SIZE), -1e4)
    logits[..., 4] = 1e4  # confidently wrong everywhere
    logits[0, 1, 2] = 1e4  # and once confidently right
    logits.requires_grad_(True)
    criterion = LabelSmoothingLoss(smoothing, PAD, convention=convention)
    loss = criterion(logits, target)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert torch.isfinite(criterion.kl_divergence(logits, target))


def test_finite_loss_when_the_model_masks_the_pad_logit_with_minus_infinity():
    logits, target = make_batch((4, 5), seed=8)
    logits[..., PAD] = float("-inf")  # q puts nothing there under others_no_pad
    logits.requires_grad_(True)
    loss = LabelSmoothingLoss(0.1, PAD, convention="others_no_pad")(logits, target)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def test_mean_over_an_all_ignored_batch_is_zero_with_a_zero_gradient():
    logits = torch.randn(2, 3, VOCAB_SIZE, dtype=torch.float64, requires_grad=True)
    target = torch.full((2, 3), PAD)
    loss = LabelSmoothingLoss(0.1, PAD)(logits, target)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(logits.grad, torch.zeros_like(logits))


@pytest.mark.parametrize("convention", SMOOTHING_CONVENTIONS)
def test_gradcheck_in_float64(convention):
    logits, target = make_batch((3, 4), seed=9)
    logits.requires_grad_(True)
    criterion = LabelSmoothingLoss(0.2, PAD, convention=convention)
    assert torch.autograd.gradcheck(lambda x: criterion(x, target), (logits,))


# ---------------------------------------------------------------------------------------------
# Errors a reader can act on


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got 1.0"):
        LabelSmoothingLoss(1.0)
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got -0.1"):
        LabelSmoothingLoss(-0.1)
    with pytest.raises(
        ValueError, match=r"convention='torch' is not one of: uniform, others, others_no_pad"
    ):
        LabelSmoothingLoss(0.1, convention="torch")
    with pytest.raises(ValueError, match=r"reduction='avg' is not one of: mean, sum, none"):
        LabelSmoothingLoss(0.1, reduction="avg")
    with pytest.raises(ValueError, match="others_no_pad' needs the pad id"):
        LabelSmoothingLoss(0.1, convention="others_no_pad")


def test_rejects_bad_inputs():
    criterion = LabelSmoothingLoss(0.1, ignore_index=PAD)
    logits, target = make_batch((2, 3))
    with pytest.raises(TypeError, match="target must hold integer class ids, got dtype"):
        criterion(logits, target.double())
    with pytest.raises(TypeError, match="logits must be floating point"):
        criterion(target, target)
    with pytest.raises(ValueError, match=r"logits \[2, 3, 7\] and target \[3, 2\] disagree"):
        criterion(logits, target.T)
    bad = target.clone()
    bad[1, 2] = 9
    with pytest.raises(ValueError, match=r"target contains class 9, outside \[0, 7\)"):
        criterion(logits, bad)
    bad[1, 2] = -3
    with pytest.raises(ValueError, match=r"target contains class -3, outside \[0, 7\)"):
        criterion(logits, bad)


def test_smoothed_targets_reject_a_vocabulary_too_small_or_a_pad_outside_it():
    target = torch.tensor([1, 1])
    with pytest.raises(ValueError, match="needs vocab_size >= 3, got 2"):
        smoothed_targets(target, 2, 0.1, "others_no_pad", pad_id=0)
    with pytest.raises(ValueError, match="pad_id=9 is not a class of vocab_size=7"):
        smoothed_targets(target, 7, 0.1, "others_no_pad", pad_id=9)


def test_repr_shows_the_settings():
    assert "convention='others'" in repr(LabelSmoothingLoss(0.1, convention="others"))
