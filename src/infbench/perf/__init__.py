"""The harness's own benchmarks (`infbench bench-*`, `make bench`): each prints a table; none is a timed unit
test. Each command runs in a test at tiny size."""
