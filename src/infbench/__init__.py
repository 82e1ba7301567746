"""infbench: reproduction harness for CompressionBench and ServerBench."""

__version__ = "0.1.0"
