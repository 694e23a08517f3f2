"""Chapter 03's stored extrapolation run: six character models on Tiny Shakespeare, one per
positional encoding, trained at context 64 and read at every position of 256-long windows
(annotated_transformer/extrapolation.py, profile "cpu").

    python scripts/extrapolation.py            # trains and stores results/extrapolation/<key>.json
    python scripts/extrapolation.py --rerun    # trains again although that record is stored

The record holds the config, each encoding's per-position curve, in-window check and block
losses, the training history and the provenance (commit, device, date, wall time). Two models
train at once (--jobs 2), one thread each. The exit status is 1 when an encoding fails the
in-window check: its loss beyond the window is then not read (chapter 03 says so), and the fix is
more updates (PROFILES["cpu"].steps), not a looser tolerance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from annotated_transformer import extrapolation

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="models trained at once (default 2)")
    parser.add_argument("--rerun", action="store_true", help="train again although stored")
    args = parser.parse_args(argv)
    record = extrapolation.run_and_store(ROOT, "cpu", rerun=args.rerun, jobs=args.jobs)
    source = record["provenance"]
    print(
        f"{record['key']}: {source['wall_time_s'] / 60:.1f} min on {source['device']}, "
        f"stored in results/extrapolation/"
    )
    not_flat = [name for name, m in record["metrics"].items() if not m["in_window"]["flat"]]
    if not_flat:
        print(f"NOT FLAT inside the training window: {', '.join(not_flat)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
