"""Side-by-side benchmarks of the package against ``torch.nn`` (``python benchmarks/run.py``)."""
