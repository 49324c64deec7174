"""paraplan: how fast, and in how much memory, a transformer trains under a parallelization plan."""

__version__ = "0.1.0"
