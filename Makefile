# Two entry points, both self-contained on a fresh machine (Python 3.11, no GPU, package registries):
#   make book   - install, fetch the book's JavaScript from npm, execute every chapter, build the HTML book
#   make test   - install, lint and format-check with ruff, run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Tests, CI and notebook runs read data from the shared copy beside the checkout when it exists.
export AT_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: install book test lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,dev]"
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

book: install
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/build_book.sh

clean:
	rm -rf _build $(VENV)
