"""Data sets of the course (chapter 08): finding files, tokenizing them, and batching them."""

from .batch import Batch
from .batching import (
    TranslationSource,
    collate_pairs,
    pair_length,
    token_budget_batches,
    translation_batches,
)
from .files import DATA_FILES, ChecksumError, DataNotFoundError, cache_dir, fetch
from .registry import DATASETS, DatasetInfo, dataset_info
from .text import (
    LanguageModelCorpus,
    WindowSource,
    evaluation_windows,
    load_language_model_corpus,
    sample_windows,
)
from .tokenizers import (
    BPETokenizer,
    CharTokenizer,
    DigitTokenizer,
    Tokenizer,
    TokenizerProtocol,
    WordTokenizer,
    load_tokenizer,
    segment_cjk,
    tokenizer_from_dict,
)
from .translation import (
    EncodedPair,
    SentencePair,
    TranslationCorpus,
    encode_corpus,
    encode_pairs,
    load_translation_corpus,
    stable_split,
    train_tokenizer,
)

__all__ = [
    "DATASETS",
    "DATA_FILES",
    "BPETokenizer",
    "Batch",
    "CharTokenizer",
    "ChecksumError",
    "DataNotFoundError",
    "DatasetInfo",
    "EncodedPair",
    "LanguageModelCorpus",
    "SentencePair",
    "DigitTokenizer",
    "Tokenizer",
    "TokenizerProtocol",
    "TranslationCorpus",
    "TranslationSource",
    "WindowSource",
    "WordTokenizer",
    "cache_dir",
    "collate_pairs",
    "dataset_info",
    "encode_corpus",
    "encode_pairs",
    "evaluation_windows",
    "fetch",
    "load_language_model_corpus",
    "load_tokenizer",
    "load_translation_corpus",
    "pair_length",
    "sample_windows",
    "segment_cjk",
    "stable_split",
    "token_budget_batches",
    "tokenizer_from_dict",
    "train_tokenizer",
    "translation_batches",
]
