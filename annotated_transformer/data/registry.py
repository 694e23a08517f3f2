"""The named data sets of the course: what each one is, its files and its splits (chapter 08).

Split names are the same everywhere: ``train``, ``valid`` and, where the data set has one, ``test``
(its standard test set). Multi30k's ``val`` is ``valid`` here and its standard test set,
``test_2016_flickr``, is ``test``; its other test sets keep their file names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetInfo:
    """A named data set; its ``files`` are names that :func:`~.files.fetch` knows."""

    name: str
    kind: str  # "language-model" or "translation"
    files: dict[str, tuple[str, ...]]  # split -> its files (one per language for translation)
    level: str = ""  # language models: "char" or "word"
    languages: tuple[str, ...] = ()  # translation: the default direction, source first
    description: str = ""

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)


def _multi30k_files(stem: str) -> tuple[str, ...]:
    return (f"multi30k/{stem}.de.gz", f"multi30k/{stem}.en.gz")


_CMN_ENG = ("cmn-eng/cmn.txt",)

DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        DatasetInfo(
            "tinyshakespeare",
            "language-model",
            {split: ("tinyshakespeare/input.txt",) for split in ("train", "valid")},
            level="char",
            description="Shakespeare, 1.1M characters; first 90% train, last 10% valid (nanoGPT)",
        ),
        DatasetInfo(
            "ptb",
            "language-model",
            {split: (f"ptb/ptb.{split}.txt",) for split in ("train", "valid", "test")},
            level="word",
            description="Penn Treebank (Mikolov), 10k words, one <eos> per line",
        ),
        DatasetInfo(
            "wikitext-2",
            "language-model",
            {split: (f"wikitext-2/{split}.txt",) for split in ("train", "valid", "test")},
            level="word",
            description="WikiText-2 (v1, tokenized), 33,278 words, one <eos> per line",
        ),
        DatasetInfo(
            "multi30k",
            "translation",
            {
                "train": _multi30k_files("train"),
                "valid": _multi30k_files("val"),
                "test": _multi30k_files("test_2016_flickr"),
                "test_2017_flickr": _multi30k_files("test_2017_flickr"),
                "test_2017_mscoco": _multi30k_files("test_2017_mscoco"),
                "test_2018_flickr": _multi30k_files("test_2018_flickr"),
            },
            languages=("de", "en"),
            description="Multi30k task 1, image captions German-English; test = test_2016_flickr",
        ),
        DatasetInfo(
            "cmn-eng",
            "translation",
            {split: _CMN_ENG for split in ("train", "valid", "test")},
            languages=("zh", "en"),
            description="Tatoeba Chinese-English pairs; 90/5/5 split by SHA-1 of the English ID",
        ),
    ]
}


def dataset_info(name: str, kind: str | None = None) -> DatasetInfo:
    """The data set called ``name`` (of ``kind`` when given); a ``ValueError`` lists valid names."""
    valid = [info.name for info in DATASETS.values() if kind is None or info.kind == kind]
    if name not in valid:
        what = f"{kind} data set" if kind else "data set"
        raise ValueError(f"{what} {name!r} is not one of: {', '.join(valid)}")
    return DATASETS[name]
