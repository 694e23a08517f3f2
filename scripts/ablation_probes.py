"""Probes that size chapter 09's studies: candidate run sizes of a study's baseline, each trained
and measured exactly as a study run is (``ablation.train_run``: the same evaluation, BLEU and
all), stored in ``results/ablation/probes/`` with provenance so the choice can be re-read.

    python scripts/ablation_probes.py tinyshakespeare            # every candidate of the task
    python scripts/ablation_probes.py multi30k NAME [NAME ...]    # the named candidates only
    python scripts/ablation_probes.py multi30k NAME --seeds 0,1,2 # the seed-to-seed spread
    python scripts/ablation_probes.py cmn-eng                     # the factorial's task

A candidate is the ``cpu`` ablation profile with overrides (``section.field``: value). The
issue's bar for a study's baseline: Tiny Shakespeare validation loss <= 1.75, Multi30k test BLEU
>= 20, in a few minutes of 2-core CPU per run (about 200 runs make the whole set of studies).
A stored probe is not trained again; one stopped part-way continues from its last checkpoint
(``runs/ablation/<run key>/``, as the studies' runs do).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
from pathlib import Path

import torch

from annotated_transformer import ablation as ab
from annotated_transformer.results.experiments import ResultsStore, run_or_load
from annotated_transformer.training.run_lock import RunDirectoryLocked

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "ablation" / "probes"
CHECKPOINTS = ROOT / "runs" / "ablation"  # the runs under way (git-ignored)

_BF16 = {"train.precision": "bf16"}
# Tiny Shakespeare's narrow candidates: 3 x 128 over 16 windows of 128 characters.
_NARROW = {
    "data.context_length": 128,
    "data.batch_size": 16,
    "model.d_model": 128,
    "model.d_ff": 512,
}
_NARROW_SCHEDULE = {
    "train.warmup": 100,
    "train.lr": 2e-3,
    "train.eval_every": 500,
    "evaluation.eval_batches": None,
}
CANDIDATES: dict[str, dict[str, dict]] = {
    # 3 layers x 256 (the studies' base: 8 heads, pre-norm, sinusoidal), 128 characters x 32.
    "tinyshakespeare": {
        "d256-l3-600": {
            **_BF16,
            "data.context_length": 128,
            "data.batch_size": 32,
            "model.d_model": 256,
            "model.d_ff": 1024,
            "train.max_steps": 600,
            "train.warmup": 60,
            "train.lr": 2e-3,
            "train.eval_every": 200,
            "evaluation.eval_batches": None,
        },
        # 600 updates of 3 x 256 reached valid loss 2.09 in 257 s: too slow per update. The `cpu`
        # profile of chapter 08 (3 x 128, 16 x 128 characters, fp32) reached 1.73 after 1500
        # updates in 115 s: a narrow model and many updates.
        "d128-l3-1500-b16": {
            **_BF16,
            **_NARROW,
            "train.max_steps": 1500,
            **_NARROW_SCHEDULE,
        },
        "d128-l3-3000-b16": {
            **_BF16,
            **_NARROW,
            "train.max_steps": 3000,
            **_NARROW_SCHEDULE,
        },
        # 3 x 128 at 1500 updates reached 2.00 in 213 s: the studies' base adds label smoothing 0.1
        # (it taxes the NLL the studies score) and dropout 0.1; without both, in bf16 and fp32.
        "d128-l3-1500-b16-ls0-drop0": {
            **_BF16,
            **_NARROW,
            "model.dropout": 0.0,
            "train.label_smoothing": 0.0,
            "train.max_steps": 1500,
            **_NARROW_SCHEDULE,
        },
        # without both: 1.782 in 85 s (bf16), the same loss in 110 s (fp32); twice the updates:
        "d128-l3-3000-b16-ls0-drop0": {
            **_BF16,
            **_NARROW,
            "model.dropout": 0.0,
            "train.label_smoothing": 0.0,
            "train.max_steps": 3000,
            **_NARROW_SCHEDULE,
        },
        "d128-l3-1500-b16-ls0-drop0-fp32": {
            **_NARROW,
            "model.dropout": 0.0,
            "train.label_smoothing": 0.0,
            "train.max_steps": 1500,
            **_NARROW_SCHEDULE,
        },
    },
    # 3 + 3 layers x 256 over a joint 8k BPE, the whole training set, batches of 4000 positions.
    "multi30k": {
        "d256-l3-500": {
            **_BF16,
            "data.bpe_vocab_size": 8000,
            "data.max_train_pairs": None,
            "data.max_tokens": 4000,
            "model.d_model": 256,
            "model.d_ff": 1024,
            "train.max_steps": 500,
            "train.warmup": 100,
            "train.lr": 2e-3,
            "train.eval_every": 250,
        },
        # greedy BLEU 10.6 in 488 s: rotary positions and GELU (valid loss 3.75 against 4.19 after 250
        # updates in the reference probes), no dropout, twice the updates of half the positions
        "d256-l3-rope-gelu-1000x2000": {
            **_BF16,
            "data.bpe_vocab_size": 8000,
            "data.max_train_pairs": None,
            "data.max_tokens": 2000,
            "model.d_model": 256,
            "model.d_ff": 1024,
            "model.positional": "rope",
            "model.activation": "gelu",
            "model.dropout": 0.0,
            "train.max_steps": 1000,
            "train.warmup": 100,
            "train.lr": 2e-3,
            "train.eval_every": 500,
        },
        # 36.5 in 366 s, of which 352 s training: a study of ~100 runs needs half of that. Half the
        # updates, with rotary or with the paper's sinusoidal positions (the studies' base); in the
        # precision the studies use (`auto`: bf16 only where the CPU computes it natively).
        **{
            f"d256-l3-{positional}-gelu-500x2000": {
                "train.precision": "auto",
                "data.bpe_vocab_size": 8000,
                "data.max_train_pairs": None,
                "data.max_tokens": 2000,
                "model.d_model": 256,
                "model.d_ff": 1024,
                "model.positional": positional,
                "model.activation": "gelu",
                "model.dropout": 0.0,
                "train.max_steps": 500,
                "train.warmup": 100,
                "train.lr": 2e-3,
                "train.eval_every": 250,
            }
            for positional in ("sinusoidal", "rope")
        },
        # A quarter the cost per token (128 wide, a 4k BPE; 0.46 s an update on a 2-core EPYC
        # against 1.4 s): does half the minutes of the size above still clear 20 BLEU (28.9 in
        # 427 s), and what do the same minutes buy (36.1 in 821 s)?
        **{
            f"d128-l3-rope-gelu-bpe4k-{steps}x2000": {
                "train.precision": "auto",
                "data.bpe_vocab_size": 4000,
                "data.max_train_pairs": None,
                "data.max_tokens": 2000,
                "model.d_model": 128,
                "model.d_ff": 512,
                "model.positional": "rope",
                "model.activation": "gelu",
                "model.dropout": 0.0,
                "train.max_steps": steps,
                "train.warmup": steps // 10,
                "train.lr": 3e-3,
                "train.eval_every": steps // 3,
            }
            for steps in (750, 1500)
        },
    },
}
# Chinese->English (the factorial's task): first Multi30k's size of the time, as the studies'
# base has it (rotary positions, warmup + cosine) and as the factorial's baseline cell has it (the
# paper's sinusoids, the Noam schedule): 8.1 and 4.9 BLEU, about 12.5 minutes each on a 2-core
# EPYC in fp32; then the narrower model that the reference profile now has.
_D256_TRANSLATION = {
    "data.bpe_vocab_size": 8000,
    "data.max_train_pairs": None,
    "data.max_tokens": 2000,
    "model.d_model": 256,
    "model.d_ff": 1024,
    "model.activation": "gelu",
    "model.dropout": 0.0,
    "model.positional": "rope",
    "train.precision": "auto",
    "train.eval_batches": None,
    "train.log_every": 50,
    "train.max_steps": 500,
    "train.warmup": 100,
    "train.lr": 2e-3,
    "train.eval_every": 250,
}
CANDIDATES["cmn-eng"] = {
    "d256-l3-rope-gelu-500x2000": _D256_TRANSLATION,
    "d256-l3-sinusoidal-noam-500x2000": {
        **_D256_TRANSLATION,
        "model.positional": "sinusoidal",
        "train.schedule": "noam",
    },
    # The Multi30k size reached 8.1 greedy BLEU here (the chapter 08 recipe, 4 + 4 x 256 trained
    # on a GPU, 32.4): a run of the same minutes spent on a model a quarter the cost per token
    # (128 wide, a 4k BPE) sees three times the sentence pairs: 22.7 BLEU in 747 s.
    "d128-l3-rope-gelu-bpe4k-1500x2000": {
        **_D256_TRANSLATION,
        "data.bpe_vocab_size": 4000,
        "model.d_model": 128,
        "model.d_ff": 512,
        "train.max_steps": 1500,
        "train.warmup": 150,
        "train.lr": 3e-3,
        "train.eval_every": 500,
    },
}


def probe(task: str, name: str, seeds: list[int]) -> list[dict]:
    """Train candidate ``name`` of ``task`` (the baseline of the ``heads`` study) per seed."""
    store = ResultsStore(OUT)
    records = []
    for config in ab.run_configs("heads", task, seeds, "cpu", CANDIDATES[task][name]):
        if not config["baseline"]:
            continue
        config = {**config, "study": "probe", "variant": name, "profile": "probe"}
        record = run_or_load(
            store, config, functools.partial(ab.train_run, checkpoint_root=CHECKPOINTS)
        )
        shutil.rmtree(ab.run_folder(CHECKPOINTS, config), ignore_errors=True)  # spent
        metrics, seconds = record["metrics"], record["provenance"]["wall_time_s"]
        shown = {k: round(v, 4) for k, v in metrics.items() if k in ("valid_loss", "test_bleu")}
        print(f"{task} {name} seed {config['seed']}: {shown} in {seconds:.0f} s", flush=True)
        records.append(record)
    return records


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(CANDIDATES))
    parser.add_argument("names", nargs="*", help="candidates (default: all of the task)")
    parser.add_argument("--seeds", default="0", help="seeds separated by commas (default: 0)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in CANDIDATES[args.task]]
    if unknown:
        parser.error(
            f"unknown candidates {unknown}; {args.task} has: {sorted(CANDIDATES[args.task])}"
        )
    seeds = ab.parse_seeds(args.seeds)
    torch.set_num_threads(2)
    try:
        for name in args.names or list(CANDIDATES[args.task]):
            probe(args.task, name, seeds)
    except (ab.RunFolderError, RunDirectoryLocked) as error:  # another copy, or a bad checkpoint
        print(f"ablation_probes: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
