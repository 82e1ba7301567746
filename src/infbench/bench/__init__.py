"""Benchmarks that print tables (run by `make bench`), never timed unit tests."""
