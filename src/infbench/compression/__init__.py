"""CompressionBench: likelihood sets, scoring, baselines and verification."""
