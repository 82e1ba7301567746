# Convenience targets; README.md gives the two commands a fresh clone needs.
VENV := .venv/bin

.PHONY: setup run test lint bench report

setup:
	bash scripts/setup-env.sh

run: setup
	$(VENV)/snakemake --cores all

test: setup
	$(VENV)/python -m pytest -v

lint: setup
	$(VENV)/snakemake --lint

# Scorer vs bare forward pass and sampling throughput on the embedded source.
bench: setup
	$(VENV)/snakemake --cores all results/sources/smollm2-135m/hf
	$(VENV)/infbench bench-likelihood results/sources/smollm2-135m/hf --out results/bench/likelihood.md
	$(VENV)/infbench bench-replay --out results/bench/replay.md

report: run
	$(VENV)/snakemake --report report.html
