"""Chapter 12's stored study: the shipped Multi30k translator decoded on the validation split with
every beam size and length penalty of the grid, and, for short sources, its exact most probable
translation against what each beam returns (annotated_transformer/results/decoding.py).

    python scripts/decoding_study.py            # stores results/decoding/<key>.json
    python scripts/decoding_study.py --rerun    # measures again although that record is stored

The record holds each grid cell's BLEU, chrF and length ratio, each searched sentence's scores,
and the provenance (commit, device, date, wall time). Two threads, fp32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from annotated_transformer.results import decoding

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rerun", action="store_true", help="measure again although stored")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    record = decoding.run_and_store(ROOT, rerun=args.rerun)
    source = record["provenance"]
    print(
        f"{record['key']}: {source['wall_time_s'] / 60:.1f} min on {source['device']}, "
        f"stored in results/decoding/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
