#!/usr/bin/env bash
# Build the HTML book into _build/html/, strictly: any Sphinx warning fails the build.
#   1. fetch the JavaScript the pages load (MathJax, require.js, the ipywidgets manager, ...)
#      from npm into book/_vendor_js/ (ignored by git, refetched only when the list changes);
#   2. execute every chapter from a clean kernel and build every page (--all: an incremental
#      build would neither re-run a chapter whose package code changed nor repeat its warnings);
#   3. point CDN addresses left in notebook outputs at the book's copies, and fail if any page
#      would still fetch from another host.
# Run it with `make book`, which puts the project's .venv first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

python scripts/book_assets.py fetch
# Every chapter's figures are drawn at twice their size and shown at their size (IPython's
# "retina" PNGs carry their display width), so they stay sharp on high-density screens and when
# the column shrinks them. The kernels read this from an IPython profile of the build's own.
IPYTHONDIR="$(mktemp -d)"
export IPYTHONDIR
trap 'rm -rf "$IPYTHONDIR"' EXIT
mkdir -p "$IPYTHONDIR/profile_default"
echo 'c.InlineBackend.figure_formats = {"retina"}' >"$IPYTHONDIR/profile_default/ipython_kernel_config.py"
# No one moves a control in a build: the explorers draw their first view without an Output widget,
# whose echo through nbclient can leave a cell waiting on its reply (annotated_transformer/book/explorer.py).
export AT_HEADLESS=1
jupyter-book build . --all --warningiserror --nitpick --keep-going
python scripts/book_assets.py localise _build/html
echo "The book is in _build/html/ (open _build/html/index.html, or serve it:"
echo "  python -m http.server --directory _build/html)"
