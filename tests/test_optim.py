import io
import math

import pytest
import torch
from torch import nn

from annotated_transformer.optim import (
    OPTIMIZER_CHOICES,
    SCHEDULE_CHOICES,
    build_optimizer,
    build_scheduler,
    constant_lr,
    noam_lr,
    parameter_groups,
    schedule_lr,
    warmup_cosine_lr,
)

# ---------------------------------------------------------------------------------------------
# noam_lr


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000])
def test_noam_matches_the_paper_formula(step):
    d_model, warmup, factor = 512, 4000, 2.0
    expected = factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert noam_lr(step, d_model, warmup, factor) == pytest.approx(expected, rel=1e-12)


def test_noam_peaks_at_warmup_with_the_closed_form_value():
    d_model, warmup, factor = 512, 400, 1.5
    rates = [noam_lr(step, d_model, warmup, factor) for step in range(1, 2001)]
    assert rates.index(max(rates)) + 1 == warmup
    assert noam_lr(warmup, d_model, warmup, factor) == pytest.approx(
        factor * (d_model * warmup) ** -0.5, rel=1e-12
    )


def test_noam_rises_before_warmup_and_falls_after():
    d_model, warmup = 64, 50
    rising = [noam_lr(step, d_model, warmup) for step in range(1, warmup + 1)]
    falling = [noam_lr(step, d_model, warmup) for step in range(warmup, 500)]
    assert all(a < b for a, b in zip(rising, rising[1:], strict=False))
    assert all(a > b for a, b in zip(falling, falling[1:], strict=False))


def test_noam_step_zero_is_zero_not_a_division_by_zero():
    assert noam_lr(0, 512, 4000) == 0.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"step": -1, "d_model": 512, "warmup": 10}, "step must be >= 0, got -1"),
        ({"step": 1, "d_model": 0, "warmup": 10}, "d_model must be > 0, got 0"),
        ({"step": 1, "d_model": 512, "warmup": 0}, "warmup must be > 0, got 0"),
        ({"step": 1, "d_model": 512, "warmup": 10, "factor": -1.0}, "factor must be > 0"),
    ],
)
def test_noam_rejects_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        noam_lr(**arguments)


# ---------------------------------------------------------------------------------------------
# warmup_cosine_lr and constant_lr


def test_warmup_cosine_endpoints_and_midpoints():
    settings = {"max_lr": 1e-3, "warmup": 100, "total_steps": 1100, "min_lr": 1e-5}
    assert warmup_cosine_lr(0, **settings) == 0.0
    assert warmup_cosine_lr(50, **settings) == pytest.approx(0.5e-3)  # halfway up
    assert warmup_cosine_lr(100, **settings) == pytest.approx(1e-3)  # the peak
    assert warmup_cosine_lr(600, **settings) == pytest.approx((1e-3 + 1e-5) / 2)  # halfway down
    assert warmup_cosine_lr(1100, **settings) == pytest.approx(1e-5)
    assert warmup_cosine_lr(5000, **settings) == 1e-5  # constant afterwards


def test_warmup_cosine_rises_to_the_peak_then_falls_to_the_floor():
    settings = {"max_lr": 1.0, "warmup": 10, "total_steps": 30, "min_lr": 0.1}
    rates = [warmup_cosine_lr(step, **settings) for step in range(41)]
    rising, falling, floor = rates[:11], rates[10:31], rates[30:]
    assert all(a < b for a, b in zip(rising, rising[1:], strict=False))
    assert all(a > b for a, b in zip(falling, falling[1:], strict=False))
    assert floor == [0.1] * len(floor)


def test_warmup_cosine_without_warmup_starts_at_max_lr():
    assert warmup_cosine_lr(0, max_lr=2.0, warmup=0, total_steps=10) == 2.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"warmup": 10, "total_steps": 10}, "total_steps must be > warmup"),
        ({"warmup": -1, "total_steps": 10}, "warmup must be >= 0"),
        ({"warmup": 1, "total_steps": 10, "min_lr": 2.0}, "need 0 <= min_lr <= max_lr"),
    ],
)
def test_warmup_cosine_rejects_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        warmup_cosine_lr(5, max_lr=1.0, **arguments)


def test_constant_is_constant():
    assert [constant_lr(step, lr=0.3) for step in (0, 1, 10**6)] == [0.3, 0.3, 0.3]


def test_schedule_lr_rejects_unknown_names_listing_the_valid_ones():
    with pytest.raises(ValueError, match=r"schedule='foo' is not one of: constant, noam, warmup"):
        schedule_lr("foo", 1)


# ---------------------------------------------------------------------------------------------
# build_scheduler


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 11))


SCHEDULE_SETTINGS = {
    "constant": {"lr": 3e-4},
    "noam": {"d_model": 8, "warmup": 5, "factor": 0.5},
    "warmup_cosine": {"max_lr": 1e-2, "warmup": 4, "total_steps": 12, "min_lr": 1e-4},
}


def train_step(model: nn.Module, optimizer, scheduler, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 11, (4, 6), generator=generator)
    loss = nn.functional.cross_entropy(model(tokens).transpose(1, 2), tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()


def test_schedule_settings_cover_every_choice():
    assert set(SCHEDULE_SETTINGS) == set(SCHEDULE_CHOICES)


@pytest.mark.parametrize("name", SCHEDULE_CHOICES)
def test_scheduler_sets_the_rate_for_the_next_update_after_each_step(name):
    model = make_model()
    optimizer = build_optimizer(model, lr=123.0)  # replaced by the schedule
    scheduler = build_scheduler(optimizer, name, **SCHEDULE_SETTINGS[name])
    for completed in range(20):
        expected = schedule_lr(name, completed + 1, **SCHEDULE_SETTINGS[name])
        # Exact: the base rate is 1.0, so LambdaLR's product is the schedule's value itself.
        assert [group["lr"] for group in optimizer.param_groups] == [expected, expected]
        assert scheduler.get_last_lr() == [expected, expected]
        train_step(model, optimizer, scheduler, seed=completed)


def test_noam_scheduler_first_update_is_step_one_not_the_annotated_transformer_off_by_one():
    model = make_model()
    optimizer = build_optimizer(model)
    scheduler = build_scheduler(optimizer, "noam", d_model=8, warmup=5)
    used = []
    for seed in range(3):
        used.append(optimizer.param_groups[0]["lr"])
        train_step(model, optimizer, scheduler, seed)
    # The Annotated Transformer would use rate(1), rate(1), rate(2) for these three updates.
    assert used == [noam_lr(1, 8, 5), noam_lr(2, 8, 5), noam_lr(3, 8, 5)]


def test_scheduler_checkpoint_roundtrip_continues_identically():
    name, settings = "warmup_cosine", SCHEDULE_SETTINGS["warmup_cosine"]
    model = make_model()
    optimizer = build_optimizer(model)
    scheduler = build_scheduler(optimizer, name, **settings)
    for seed in range(5):
        train_step(model, optimizer, scheduler, seed)

    buffer = io.BytesIO()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        buffer,
    )
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)  # plain data only, no pickled code

    resumed_model = make_model()
    resumed_optimizer = build_optimizer(resumed_model)
    # Built with other settings on purpose: the checkpoint carries the schedule's own.
    resumed_scheduler = build_scheduler(resumed_optimizer, name, **{**settings, "max_lr": 9.0})
    resumed_model.load_state_dict(checkpoint["model"])
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    resumed_scheduler.load_state_dict(checkpoint["scheduler"])

    for seed in range(5, 15):
        train_step(model, optimizer, scheduler, seed)
        train_step(resumed_model, resumed_optimizer, resumed_scheduler, seed)
        assert resumed_scheduler.get_last_lr() == scheduler.get_last_lr()
        assert resumed_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert resumed_scheduler.last_epoch == scheduler.last_epoch == 15
    for original, resumed in zip(model.parameters(), resumed_model.parameters(), strict=True):
        torch.testing.assert_close(resumed, original, rtol=0, atol=0)


def test_scheduler_rejects_unknown_names_before_touching_the_optimizer():
    optimizer = build_optimizer(make_model(), lr=0.5)
    with pytest.raises(ValueError, match=r"schedule='foo' is not one of: constant, noam, warmup"):
        build_scheduler(optimizer, "foo")
    with pytest.raises(TypeError, match="warmup"):
        build_scheduler(optimizer, "noam", d_model=8)
    assert all(group["lr"] == 0.5 for group in optimizer.param_groups)
    assert all("initial_lr" not in group for group in optimizer.param_groups)


# ---------------------------------------------------------------------------------------------
# build_optimizer


def test_parameter_groups_decay_matrices_and_embeddings_not_biases_or_norms():
    model = make_model()
    embedding, first, norm, last = model
    optimizer = build_optimizer(model, weight_decay=0.1)
    decayed, not_decayed = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0

    def ids(parameters):
        return {id(parameter) for parameter in parameters}

    assert ids(decayed["params"]) == ids([embedding.weight, first.weight, last.weight])
    assert ids(not_decayed["params"]) == ids([first.bias, norm.weight, norm.bias, last.bias])


def test_parameter_groups_list_a_tied_weight_once_and_skip_frozen_ones():
    model = make_model()
    model[3].weight = model[0].weight  # tie the output projection to the embedding (§3.4)
    model[2].weight.requires_grad_(False)
    groups = parameter_groups(model, weight_decay=0.1)
    listed = [id(parameter) for group in groups for parameter in group["params"]]
    assert len(listed) == len(set(listed))
    assert id(model[0].weight) in listed
    assert id(model[2].weight) not in listed


def test_parameter_groups_leave_out_an_empty_group():
    groups = parameter_groups(nn.Linear(3, 4, bias=False), weight_decay=0.1)
    assert [group["weight_decay"] for group in groups] == [0.1]


@pytest.mark.parametrize(
    ("name", "optimizer_class"), [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)]
)
def test_build_optimizer_uses_the_paper_betas_and_eps(name, optimizer_class):
    optimizer = build_optimizer(make_model(), name, lr=0.25)
    assert type(optimizer) is optimizer_class
    for group in optimizer.param_groups:
        assert group["betas"] == (0.9, 0.98)
        assert group["eps"] == 1e-9
        assert group["lr"] == 0.25


def test_adamw_decays_the_weights_and_adam_with_zero_decay_does_not():
    # With a zero gradient Adam moves nothing, so any change is the decay.
    results = {}
    for name, weight_decay in (("adamw", 0.5), ("adam", 0.0)):
        model = nn.Linear(2, 2)
        before = model.weight.detach().clone()
        optimizer = build_optimizer(model, name, lr=0.1, weight_decay=weight_decay)
        for parameter in model.parameters():
            parameter.grad = torch.zeros_like(parameter)
        optimizer.step()
        results[name] = (before, model.weight.detach())
    before, after = results["adamw"]
    torch.testing.assert_close(after, before * (1 - 0.1 * 0.5))
    before, after = results["adam"]
    torch.testing.assert_close(after, before, rtol=0, atol=0)


def test_build_optimizer_rejects_unknown_names_listing_the_valid_ones():
    assert OPTIMIZER_CHOICES == ("adam", "adamw", "muon")
    with pytest.raises(ValueError, match=r"optimizer='sgd' is not one of: adam, adamw, muon"):
        build_optimizer(make_model(), "sgd")
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        build_optimizer(make_model(), weight_decay=-0.1)


def test_noam_peak_for_the_base_model_is_about_7e_minus_4():
    # A number to recognise in chapter 06: d_model=512, warmup=4000.
    assert noam_lr(4000, 512, 4000) == pytest.approx(1 / math.sqrt(512 * 4000))
    assert noam_lr(4000, 512, 4000) == pytest.approx(6.99e-4, rel=1e-3)


# -- Muon for the layers' matrices, AdamW for the rest -------------------------------------------


def small_transformer() -> nn.Module:
    import annotated_transformer as at

    torch.manual_seed(0)
    config = at.TransformerConfig(
        arch="decoder-only", vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, pad_id=None
    )
    return at.build_model(config)


def test_muon_takes_the_layers_weight_matrices_and_leaves_the_rest_to_adamw():
    from annotated_transformer.optim import muon_parameters

    model = small_transformer()
    hidden, others = muon_parameters(model)
    names = {id(p): name for name, p in model.named_parameters()}
    assert hidden and all(".layers." in f".{names[id(p)]}" and p.ndim == 2 for p in hidden)
    assert {names[id(p)].rsplit(".", 2)[-2] for p in hidden} == {"qkv", "out", "linear1", "linear2"}
    assert all(
        "embedding" in names[id(p)] or p.ndim < 2 or "layers" not in names[id(p)] for p in others
    )
    assert len(hidden) + len(others) == len(list(model.parameters()))


def test_muon_adamw_updates_as_torchs_muon_and_adamw_side_by_side():
    """One update of the combined optimizer against torch.optim.Muon on the hidden matrices and
    torch.optim.AdamW on the rest, from the same weights and gradients."""
    from annotated_transformer.optim import MuonAdamW, muon_parameters

    torch.manual_seed(0)
    ours, theirs = small_transformer(), small_transformer()
    theirs.load_state_dict(ours.state_dict())
    optimizer = build_optimizer(ours, "muon", lr=0.02, weight_decay=0.1)
    assert isinstance(optimizer, MuonAdamW)
    hidden, others = muon_parameters(theirs)
    muon = torch.optim.Muon(hidden, lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW(
        [
            {"params": [p for p in others if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for p in others if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=0.02,
        betas=(0.9, 0.98),
        eps=1e-9,
    )
    for _ in range(3):
        for model in (ours, theirs):
            for parameter in model.parameters():
                parameter.grad = torch.ones_like(parameter) * 0.01 + 0.001 * parameter.detach()
        optimizer.step()
        muon.step()
        adamw.step()
    for (name, mine), other in zip(
        ours.state_dict().items(), theirs.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(mine, other, msg=name)
    # a schedule sets both halves: the groups are the inner optimizers' own
    for group in optimizer.param_groups:
        group["lr"] = 0.5
    assert optimizer.muon.param_groups[0]["lr"] == optimizer.adamw.param_groups[0]["lr"] == 0.5
