# Two entry points, both self-contained on a fresh machine (Python 3.11, no GPU, package registries):
#   make book   - install, fetch the book's JavaScript from npm, execute every chapter, build _build/html
#   make test   - install, ruff (lint + format check), build the book (every chapter executes),
#                 then the test suite, including a headless-Chromium test of the built pages,
#                 then `make dist` (the release's sdist and wheel, built and checked)
PYTHON   ?= python3
VENV     ?= .venv
BIN       = $(VENV)/bin
CHROMIUM ?= /usr/bin/chromium
# Tests, CI and notebook runs read data from the shared copy beside the checkout when it exists.
export AT_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: install book test lint pytest dist release clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,dev]"
	$(BIN)/python -m pip check
	touch $@

install: $(VENV)/.installed

# Debian's Chromium for the browser test (the machine is root; no browser is downloaded by a tool).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

book: install
	command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/build_book.sh

# The unit tests use tiny tensors, for which one thread per process is fastest.
pytest: install $(CHROMIUM)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest

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
