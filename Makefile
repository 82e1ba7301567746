# Convenience targets; README.md gives the two commands a fresh clone needs.
VENV := .venv/bin

.PHONY: setup run test lint format bench report

setup:
	bash scripts/setup-env.sh

run: setup
	$(VENV)/snakemake --cores all

test: setup
	$(VENV)/python -m pytest -v

# ruff (lint and format) on the Python code, snakefmt on the rule files, Snakemake's own lint
lint: setup
	$(VENV)/ruff check src tests workflow/scripts scripts
	$(VENV)/ruff format --check src tests workflow/scripts scripts
	$(VENV)/snakefmt --check Snakefile workflow/rules
	$(VENV)/snakemake --lint

# Rewrite the code and rule files in the project's format (what `make lint` checks).
format: setup
	$(VENV)/ruff check --fix src tests workflow/scripts scripts
	$(VENV)/ruff format src tests workflow/scripts scripts
	$(VENV)/snakefmt Snakefile workflow/rules

# Scorer vs bare forward pass and sampling throughput on the embedded source.
bench: setup
	$(VENV)/snakemake --cores all results/sources/smollm2-135m/hf
	$(VENV)/infbench bench-likelihood results/sources/smollm2-135m/hf --out results/bench/likelihood.md
	$(VENV)/infbench bench-replay --out results/bench/replay.md
	$(VENV)/infbench stage-times --out results/bench/stage_times.md

report: run
	$(VENV)/snakemake --report report.html --report-stylesheet workflow/report/report.css
