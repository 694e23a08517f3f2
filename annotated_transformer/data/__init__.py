"""Data sets of the course (chapter 08): finding files, and turning them into batches."""

from .batch import Batch
from .files import DATA_FILES, ChecksumError, DataNotFoundError, cache_dir, fetch

__all__ = ["Batch", "DATA_FILES", "ChecksumError", "DataNotFoundError", "cache_dir", "fetch"]
