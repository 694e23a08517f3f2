"""The suite's results document as text: a fixed-width table for the terminal, and the Markdown
table that ``benchmarks/README.md`` shows (``python benchmarks/run.py --table PATH``)."""

from __future__ import annotations


def format_table(document: dict) -> str:
    lines = [f"{'benchmark':<78} {'ours':>12} {'reference':>12} {'unit':>12} {'ratio':>6}"]
    for item in document["results"]:
        lines.append(
            f"{item['name']:<78} {item['ours']:>12,.4g} {item['reference']:>12,.4g} "
            f"{item['unit']:>12} {item['ratio']:>6.2f}"
        )
    for item in document["skipped"]:
        lines.append(f"{item['name']:<78} skipped: {item['reason']}")
    return "\n".join(lines)


def readable(value: float) -> str:
    """Four significant digits, without an exponent for large values: 20,040 not 2.004e+04."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def markdown_table(document: dict) -> str:
    """The results of a stored document as a Markdown table, with its provenance above it."""
    load = document.get("load_average") or {}
    lines = [
        f"`{document['mode']}` run on {document['device']} ({document['device_type']}, "
        f"{document.get('threads', '?')} threads), torch {document['torch']}, "
        f"commit {(document.get('git_commit') or 'unknown')[:7]}"
        + (" with uncommitted changes" if document.get("uncommitted_changes") else "")
        + f", {document['date']}; "
        f"{document['seconds']:.0f} s"
        + (
            f"; load average before {load['before'][0]:.2f}, after {load['after'][0]:.2f}"
            if load.get("before") and load.get("after")
            else ""
        )
        + ".",
        "",
        "| Row | ours | reference | unit | ratio |",
        "|---|---:|---:|---|---:|",
    ]
    for item in document["results"]:
        name = item["name"] + (f" ({item['note']})" if item.get("note") else "")
        lines.append(
            f"| {name} | {readable(item['ours'])} | {readable(item['reference'])} | {item['unit']} "
            f"| {item['ratio']:.2f} |"
        )
    return "\n".join(lines)


# Run-to-run spread of a training row's ratio on one machine: repeated quick runs of one commit
# on a 2-core CPU gave ratios up to 0.12 apart (0.93-1.05); a fall by more than this is a
# regression beyond noise.
RATIO_NOISE = 0.12


def regressions(document: dict, history: list[dict]) -> list[str]:
    """One line per row of ``document`` whose ratio fell by more than :data:`RATIO_NOISE` from
    the last stored run on the same device (``history``, oldest first); a line saying so when
    none did, or when there is nothing to compare with."""
    same = [stored for stored in history if stored["device"] == document["device"]]
    if not same:
        return [f"regressions: no earlier stored run on {document['device']} to compare with"]
    last = same[-1]
    before = {item["name"]: item["ratio"] for item in last["results"]}
    lines = [
        f"REGRESSION {item['name']}: ratio {item['ratio']:.2f}, was {before[item['name']]:.2f} "
        f"at {(last.get('git_commit') or 'unknown')[:7]} ({last['date'][:10]})"
        for item in document["results"]
        if item["name"] in before and item["ratio"] < before[item["name"]] - RATIO_NOISE
    ]
    commit = (last.get("git_commit") or "unknown")[:7]
    return lines or [
        f"regressions: none beyond {RATIO_NOISE} against {commit} ({last['date'][:10]})"
    ]
