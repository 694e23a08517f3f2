import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config, tiny_model

from annotated_transformer.config import TrainConfig
from annotated_transformer.data.batch import Batch
from annotated_transformer.losses import LabelSmoothingLoss
from annotated_transformer.model import build_model
from annotated_transformer.optim import schedule_lr
from annotated_transformer.training.checkpoint import load_checkpoint
from annotated_transformer.training.resuming import ResumeMismatch
from annotated_transformer.training.train import (
    TrainingDiverged,
    accumulate_gradients,
    data_generator,
    evaluate,
    forward_logits,
    seed_everything,
)
from annotated_transformer.training.trainer import Trainer

PAD = 0
VOCAB = 11


def random_batch(generator, rows=4, length=6, arch="decoder-only"):
    """Token sequences of random lengths, padded: micro-batches hold different token counts."""
    tokens = torch.randint(1, VOCAB, (rows, length + 1), generator=generator)
    lengths = torch.randint(2, length + 2, (rows,), generator=generator)
    tokens[torch.arange(length + 1)[None, :] >= lengths[:, None]] = PAD
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    if arch == "encoder-decoder":
        return Batch(inputs, targets, src=tokens[:, 1:].flip(1).clone())
    if arch == "encoder-only":
        return Batch(inputs, tokens[:, :-1].clone())
    return Batch(inputs, targets)


class RandomSource:
    """A data source after the protocol: ``batches`` batches per epoch, all from ``generator``."""

    def __init__(self, batches=5, arch="decoder-only", crash_at=None):
        self.batches, self.arch, self.crash_at, self.calls = batches, arch, crash_at, 0

    def __call__(self, epoch, generator):
        for _ in range(self.batches):
            self.calls += 1
            if self.crash_at is not None and self.calls == self.crash_at:
                raise KeyboardInterrupt("simulated crash")
            yield random_batch(generator, arch=self.arch)


def quiet_config(**overrides):
    values = {"progress": False, "device": "cpu", "log_every": 1, "max_steps": 8, "lr": 3e-3}
    return TrainConfig(**{**values, **overrides})


# ---------------------------------------------------------------------------------------------
# TrainConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("optimizer", "sgd", "optimizer='sgd' is not one of: adam, adamw"),
        ("schedule", "linear", "schedule='linear' is not one of: constant, noam, warmup_cosine"),
        ("precision", "fp16", "precision='fp16' is not one of: fp32, bf16, auto"),
        ("device", "tpu", "device='tpu' is not one of: auto, cpu, cuda, mps"),
        ("accumulation", 0, "accumulation=0 is not accepted: use a positive integer"),
        ("max_steps", 2.5, "max_steps=2.5 is not accepted"),
        ("lr", 0.0, "lr=0.0 is not accepted: use a number in (0.0, inf)"),
        ("label_smoothing", 1.0, "label_smoothing=1.0 is not accepted"),
        ("grad_clip", -1.0, "grad_clip=-1.0 is not accepted"),
        ("betas", (0.9,), "betas=(0.9,) is not accepted"),
        ("early_stopping_mode", "best", "early_stopping_mode='best' is not one of"),
        ("compile", "yes", "compile='yes' is not accepted: use True or False"),
    ],
)
def test_train_config_names_the_field_the_value_and_what_is_accepted(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(**{field: value})


def test_train_config_checks_the_schedule_against_the_steps():
    with pytest.raises(ValueError, match="warmup_cosine' needs max_steps > warmup"):
        TrainConfig(schedule="warmup_cosine", warmup=100, max_steps=100)
    with pytest.raises(ValueError, match="schedule='noam'"):
        TrainConfig(schedule="noam", warmup=0)


def test_train_config_round_trips_through_a_dict_and_rejects_unknown_keys():
    config = TrainConfig(betas=[0.9, 0.95], grad_clip=1.0)
    assert config.betas == (0.9, 0.95)
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown TrainConfig fields: learning_rate"):
        TrainConfig.from_dict({"learning_rate": 1e-3})


def test_early_stopping_mode_auto_maximises_accuracy_and_minimises_loss():
    assert TrainConfig(early_stopping_metric="accuracy").maximize
    assert not TrainConfig(early_stopping_metric="loss").maximize
    assert TrainConfig(early_stopping_metric="loss", early_stopping_mode="max").maximize


def test_seed_everything_makes_every_generator_repeat():
    import random

    import numpy as np

    seed_everything(7)
    draw = lambda: (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: E731, NPY002
    first = draw()
    seed_everything(7)
    assert draw() == first


def test_the_data_generator_depends_on_seed_and_epoch_only():
    draw = lambda seed, epoch: torch.rand(3, generator=data_generator(seed, epoch))  # noqa: E731
    assert torch.equal(draw(0, 1), draw(0, 1))
    assert not torch.equal(draw(0, 1), draw(0, 2))
    assert not torch.equal(draw(0, 1), draw(1, 1))


# ---------------------------------------------------------------------------------------------
# One update


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder", "encoder-only"])
def test_accumulated_gradient_equals_the_gradient_of_one_big_batch(arch):
    # Three micro-batches with different numbers of target tokens (random padding).
    generator = torch.Generator().manual_seed(0)
    micro = [random_batch(generator, rows=rows, arch=arch) for rows in (2, 3, 5)]
    assert len({batch.num_tokens(PAD) for batch in micro}) == 3
    loss = LabelSmoothingLoss(0.1, ignore_index=PAD, reduction="sum")

    model = tiny_model(arch)
    loss_sum, tokens = accumulate_gradients(model, micro, loss, arch=arch)
    accumulated = {name: p.grad.clone() for name, p in model.named_parameters()}

    model.zero_grad()
    big = Batch(
        torch.cat([b.inputs for b in micro]),
        torch.cat([b.targets for b in micro]),
        None if micro[0].src is None else torch.cat([b.src for b in micro]),
    )
    mean_loss = LabelSmoothingLoss(0.1, ignore_index=PAD)(
        forward_logits(model, big, arch), big.targets
    )
    mean_loss.backward()

    assert tokens == big.num_tokens(PAD)
    assert loss_sum / tokens == pytest.approx(mean_loss.item(), rel=1e-5)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(accumulated[name], parameter.grad, rtol=1e-5, atol=1e-7)


def test_accumulate_gradients_needs_a_summed_loss():
    with pytest.raises(ValueError, match="reduction='sum'"):
        accumulate_gradients(tiny_model(), [], LabelSmoothingLoss(0.0), arch="decoder-only")


def test_the_schedule_steps_once_per_update_not_per_micro_batch():
    config = quiet_config(accumulation=3, max_steps=4, schedule="warmup_cosine", warmup=2)
    source = RandomSource(batches=100)
    trainer = Trainer(tiny_model(), config, source)
    trainer.fit()
    assert trainer.scheduler.last_epoch == 4  # not 4 * 3
    assert trainer.batch_index == 12 and source.calls == 12
    arguments = config.schedule_arguments(16)
    assert [row["lr"] for row in trainer.history] == [
        pytest.approx(schedule_lr("warmup_cosine", step, **arguments)) for step in range(1, 5)
    ]


def test_forward_rejects_a_batch_that_does_not_fit_the_architecture():
    batch = Batch(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="needs batch.src"):
        forward_logits(tiny_model("encoder-decoder"), batch, "encoder-decoder")


# ---------------------------------------------------------------------------------------------
# Evaluation


def test_evaluate_matches_cross_entropy_and_accuracy_over_all_tokens():
    model = tiny_model()
    generator = torch.Generator().manual_seed(1)
    batches = [random_batch(generator, rows=rows) for rows in (3, 5)]
    metrics = evaluate(model, batches, PAD)
    with torch.no_grad():
        logits = torch.cat([model(b.inputs).flatten(0, 1) for b in batches])  # [N, V]
    targets = torch.cat([b.targets.flatten() for b in batches])
    kept = targets != PAD
    assert metrics["loss"] == pytest.approx(F.cross_entropy(logits[kept], targets[kept]).item())
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]))
    expected = (logits[kept].argmax(-1) == targets[kept]).float().mean().item()
    assert metrics["accuracy"] == pytest.approx(expected)
    assert metrics["tokens"] == int(kept.sum())
    assert evaluate(model, batches, PAD, max_batches=1)["tokens"] == batches[0].num_tokens(PAD)


# ---------------------------------------------------------------------------------------------
# The loop


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resuming_continues_exactly_as_a_run_never_interrupted(tmp_path, optimizer):
    # Dropout on, so the random state matters; 5 batches per epoch, so the data order crosses
    # epochs; accumulation 2, so the data position is not the step. Muon: both halves' state.
    def trainer(directory, source):
        config = quiet_config(
            optimizer=optimizer,
            max_steps=8,
            accumulation=2,
            save_every=3,
            schedule="warmup_cosine",
            warmup=2,
            grad_clip=1.0,
            checkpoint_dir=str(directory),
        )
        return Trainer(tiny_model(dropout=0.1), config, source)

    uninterrupted = trainer(tmp_path / "whole", RandomSource()).fit()

    with pytest.raises(KeyboardInterrupt):  # dies in update 8, after the save at update 6
        trainer(tmp_path / "crashed", RandomSource(crash_at=15)).fit()
    seed_everything(12345)  # a new process: nothing of the first survives but the checkpoint
    resumed = trainer(tmp_path / "crashed", RandomSource())
    resumed.resume(tmp_path / "crashed" / "last.pt")
    assert resumed.step == 6
    history = resumed.fit()

    assert [row["train_loss"] for row in history] == [row["train_loss"] for row in uninterrupted]
    assert [row["step"] for row in history] == list(range(1, 9))
    whole = load_checkpoint(tmp_path / "whole" / "last.pt")["model"]
    crashed = load_checkpoint(tmp_path / "crashed" / "last.pt")["model"]
    for name, tensor in whole.items():
        assert torch.equal(tensor, crashed[name]), name


def test_fit_in_parts_equals_fit_at_once():
    config = quiet_config(max_steps=6)
    whole = Trainer(tiny_model(dropout=0.1), config, RandomSource(batches=4)).fit()
    parts = Trainer(tiny_model(dropout=0.1), config, RandomSource(batches=4))
    parts.fit(steps=2)
    parts.fit(steps=1)
    history = parts.fit()
    assert [row["train_loss"] for row in history] == [row["train_loss"] for row in whole]


def test_resume_refuses_a_checkpoint_of_another_model(tmp_path):
    trainer = Trainer(tiny_model(), quiet_config(max_steps=1, checkpoint_dir=tmp_path), [])
    trainer.save()
    bigger = build_model(tiny_config(d_ff=64))
    other = Trainer(bigger, quiet_config(max_steps=1), [])
    with pytest.raises(ResumeMismatch, match=r"model\.d_ff: 32 -> 64 \(may not change on resume\)"):
        other.resume(tmp_path / "last.pt")


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    model = tiny_model()
    config = quiet_config(max_steps=10, save_every=2, checkpoint_dir=tmp_path)
    trainer = Trainer(model, config, RandomSource())

    def poison(module, inputs, output):  # the logits of update 5 become NaN
        return output * float("nan") if trainer.step == 4 else output

    model.output_projection.register_forward_hook(poison)
    with pytest.raises(TrainingDiverged, match="diverged at update 5: the loss is nan") as error:
        trainer.fit()
    assert error.value.step == 5
    assert error.value.checkpoint == tmp_path / "last.pt"
    assert "last good checkpoint is kept at" in str(error.value)
    saved = load_checkpoint(tmp_path / "last.pt")
    assert saved["step"] == 4
    assert all(torch.isfinite(tensor).all() for tensor in saved["model"].values())
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())


def test_early_stopping_after_patience_evaluations_without_improvement(tmp_path):
    scores = iter([1.0, 2.0, 2.0, 1.5, 3.0, 4.0])  # best at the 2nd evaluation, then 2 misses
    config = quiet_config(
        max_steps=100,
        eval_every=2,
        early_stopping_metric="score",
        early_stopping_mode="max",
        early_stopping_patience=2,
        checkpoint_dir=tmp_path,
    )
    generator = torch.Generator().manual_seed(0)
    trainer = Trainer(
        tiny_model(),
        config,
        RandomSource(),
        [random_batch(generator)],
        extra_metrics=lambda model: {"score": next(scores)},
    )
    trainer.fit()
    assert trainer.stop_reason == "early_stopping"
    assert trainer.step == 8
    assert (trainer.best_value, trainer.best_step) == (2.0, 4)
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["step"] == 4 and best["history"][-1]["eval_score"] == 2.0
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 8
    assert [row["eval_score"] for row in trainer.history if "eval_score" in row] == [1, 2, 2, 1.5]


def test_an_unknown_early_stopping_metric_is_refused_before_any_work():
    config = quiet_config(eval_every=1, early_stopping_metric="bleu")
    generator = torch.Generator().manual_seed(0)
    message = r"early_stopping_metric='bleu' is not among the evaluation metrics: loss, perplexity"
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_model(), config, RandomSource(), [random_batch(generator)])
    # With extra metrics the names are known only at the first evaluation.
    trainer = Trainer(
        tiny_model(),
        config,
        RandomSource(),
        [random_batch(generator)],
        extra_metrics=lambda model: {"chrf": 1.0},
    )
    with pytest.raises(ValueError, match="'bleu' is not among the evaluation metrics: loss.*chrf"):
        trainer.fit()


def test_patience_without_evaluation_data_is_refused():
    with pytest.raises(
        ValueError,
        match="early_stopping_patience=3 needs evaluation data \\(eval_data\\), and this run has none",
    ):
        Trainer(tiny_model(), quiet_config(early_stopping_patience=3), RandomSource())


def test_history_is_written_as_csv_and_json(tmp_path):
    generator = torch.Generator().manual_seed(0)
    config = quiet_config(max_steps=4, log_every=2, eval_every=4, checkpoint_dir=tmp_path)
    Trainer(tiny_model(), config, RandomSource(), [random_batch(generator)]).fit()
    import csv
    import json

    rows = json.loads((tmp_path / "history.json").read_text())
    assert [row["step"] for row in rows] == [2, 4]
    assert {"lr", "train_loss", "tokens_per_second", "wall_time"} <= set(rows[0])
    assert "eval_loss" in rows[1] and "eval_loss" not in rows[0]
    table = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [int(row["step"]) for row in table] == [2, 4]
    assert float(table[1]["eval_accuracy"]) == rows[1]["eval_accuracy"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "best.pt",
        "history.csv",
        "history.json",
        "last.pt",
    ]


def test_a_list_of_batches_is_a_data_source_and_a_one_shot_iterator_is_not():
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(generator) for _ in range(3)]
    trainer = Trainer(tiny_model(), quiet_config(max_steps=4), batches)
    trainer.fit()
    assert (trainer.epoch, trainer.batch_index) == (1, 1)
    with pytest.raises(TypeError, match="one-shot iterator"):
        Trainer(tiny_model(), quiet_config(), iter(batches))


def test_the_tokenizer_state_must_be_json_data():
    with pytest.raises(TypeError, match="JSON-serialisable"):
        Trainer(tiny_model(), quiet_config(), [], tokenizer={"merges": {1, 2}})
    trainer = Trainer(tiny_model(), quiet_config(), [], tokenizer={"type": "bytes"})
    assert trainer.state_dict()["tokenizer"] == {"type": "bytes"}


def test_no_output_without_progress_and_a_bar_with_it(capsys):
    Trainer(tiny_model(), quiet_config(max_steps=2), RandomSource()).fit()
    assert capsys.readouterr() == ("", "")
    Trainer(tiny_model(), quiet_config(max_steps=2, progress=True), RandomSource()).fit()
    assert "train" in capsys.readouterr().err


def test_bf16_autocast_trains_on_cpu():
    trainer = Trainer(tiny_model(), quiet_config(max_steps=2, precision="bf16"), RandomSource())
    history = trainer.fit()
    assert all(math.isfinite(row["train_loss"]) for row in history)


def test_auto_precision_is_bf16_only_where_the_device_computes_it_natively(tmp_path, monkeypatch):
    import annotated_transformer.training.train as train_module

    xeon, epyc = tmp_path / "xeon", tmp_path / "epyc"
    xeon.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    epyc.write_text("processor : 0\nflags : fpu avx2 fma\n")
    assert "avx512_bf16" in train_module.cpu_flags(str(xeon))
    assert train_module.cpu_flags(str(tmp_path / "missing")) == set()
    read = train_module.cpu_flags
    for path, expected in ((xeon, "bf16"), (epyc, "fp32")):
        monkeypatch.setattr(train_module, "cpu_flags", lambda path=path: read(str(path)))
        assert train_module.resolve_precision("cpu", "auto") == expected
        # an explicit choice is kept whatever the CPU
        assert train_module.resolve_precision("cpu", "fp32") == "fp32"
        assert train_module.resolve_precision("cpu", "bf16") == "bf16"
        # an explicit bf16 where it is emulated is trained, with a warning that says so
        config = quiet_config(max_steps=1, precision="bf16")
        if expected == "fp32":
            with pytest.warns(UserWarning, match="without native bfloat16.*precision='auto'"):
                Trainer(tiny_model(), config, RandomSource())
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                Trainer(tiny_model(), config, RandomSource())
    with pytest.raises(ValueError, match="fp32, bf16, auto"):
        train_module.resolve_precision("cpu", "fp16")
    trainer = Trainer(tiny_model(), quiet_config(max_steps=2, precision="auto"), RandomSource())
    assert all(math.isfinite(row["train_loss"]) for row in trainer.fit())


def test_compile_wraps_the_model_only_when_asked(monkeypatch):
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda module: compiled.append(module) or module)
    Trainer(tiny_model(), quiet_config(), RandomSource())
    assert compiled == []
    model = tiny_model()
    Trainer(model, quiet_config(compile=True), RandomSource())
    assert compiled == [model]


def test_evaluation_data_may_be_a_data_source_and_gives_the_same_batches_each_time():
    trainer = Trainer(tiny_model(), quiet_config(), RandomSource(), RandomSource(batches=2))
    first = trainer.evaluate()
    assert first == trainer.evaluate()
    assert first["tokens"] > 0
