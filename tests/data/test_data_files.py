"""Data file resolution: local directory, cache, verified download, clear offline errors."""

from __future__ import annotations

import csv
import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

from annotated_transformer.data import files
from annotated_transformer.data.files import (
    DATA_FILES,
    ChecksumError,
    DataFile,
    DataNotFoundError,
    fetch,
    sha256_of,
)

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Each test gets an empty cache and forgets earlier checksum verifications."""
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AT_DATA_DIR", raising=False)
    monkeypatch.setattr(files, "_VERIFIED", set())


def test_registry_matches_shared_manifest():
    with open(SHARED_DATA / "MANIFEST.tsv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    manifest = {
        row["relative_path"]: DataFile(
            row["canonical_download_url"], row["sha256"], int(row["bytes"])
        )
        for row in rows
    }
    assert manifest == DATA_FILES


def test_fetch_reads_the_local_directory_first(monkeypatch):
    monkeypatch.setenv("AT_DATA_DIR", str(SHARED_DATA))
    path = fetch("tinyshakespeare/input.txt")
    assert path == SHARED_DATA / "tinyshakespeare" / "input.txt"
    assert path.read_text()[:9] == "First Cit"


def test_corrupt_local_copy_is_refused(tmp_path):
    corrupt = tmp_path / "ptb" / "ptb.valid.txt"
    corrupt.parent.mkdir()
    corrupt.write_bytes((SHARED_DATA / "ptb" / "ptb.valid.txt").read_bytes()[:-1] + b"!")
    with pytest.raises(ChecksumError, match=r"ptb/ptb.valid.txt should have c9fe6985"):
        fetch("ptb/ptb.valid.txt", data_dir=tmp_path)


def test_offline_error_names_file_url_and_destination(monkeypatch, tmp_path):
    monkeypatch.setitem(
        DATA_FILES,
        "ptb/ptb.test.txt",
        DATA_FILES["ptb/ptb.test.txt"]._replace(url="http://127.0.0.1:9/x"),
    )
    with pytest.raises(DataNotFoundError) as error:
        fetch("ptb/ptb.test.txt", data_dir=tmp_path / "empty")
    message = str(error.value)
    assert "ptb/ptb.test.txt" in message
    assert "http://127.0.0.1:9/x" in message
    assert str(tmp_path / "cache" / "ptb" / "ptb.test.txt") in message
    assert not (tmp_path / "cache" / "ptb" / "ptb.test.txt").exists()


def test_no_download_gives_clear_error(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"Download https://raw.githubusercontent.com/"):
        fetch("ptb/ptb.test.txt", data_dir=tmp_path, download=False)


def test_unknown_name_lists_known_files():
    with pytest.raises(KeyError, match=r"tinyshakespeare/input.txt"):
        fetch("shakespeare.txt")


@pytest.fixture
def file_server(tmp_path):
    """A loopback HTTP server over a directory: the download path without the internet."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_is_verified_cached_and_reused(monkeypatch, tmp_path, file_server):
    root, base = file_server
    source = SHARED_DATA / "ptb" / "ptb.valid.txt"
    (root / "ptb.valid.txt").write_bytes(source.read_bytes())
    entry = DATA_FILES["ptb/ptb.valid.txt"]._replace(url=f"{base}/ptb.valid.txt")
    monkeypatch.setitem(DATA_FILES, "ptb/ptb.valid.txt", entry)

    path = fetch("ptb/ptb.valid.txt")
    assert path == tmp_path / "cache" / "ptb" / "ptb.valid.txt"
    assert sha256_of(path) == entry.sha256
    (root / "ptb.valid.txt").unlink()  # the second call must not need the server
    assert fetch("ptb/ptb.valid.txt") == path


def test_bad_download_leaves_no_file_behind(monkeypatch, tmp_path, file_server):
    root, base = file_server
    (root / "ptb.valid.txt").write_bytes(b"not the real file\n")
    entry = DATA_FILES["ptb/ptb.valid.txt"]._replace(url=f"{base}/ptb.valid.txt")
    monkeypatch.setitem(DATA_FILES, "ptb/ptb.valid.txt", entry)
    with pytest.raises(ChecksumError):
        fetch("ptb/ptb.valid.txt")
    cache = tmp_path / "cache" / "ptb"
    assert list(cache.iterdir()) == []  # neither the target nor a .part file
