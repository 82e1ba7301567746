"""Where every result lives: one method per file or directory under ``results/``.

The rules (``workflow/rules/*.smk``) call them with wildcard names to get patterns
(``LAYOUT.measured("{source}", "{candidate}")``); Python calls them with values. No other module writes a
``results/`` path. ``logs/`` and ``benchmarks/`` are Snakemake's own and stay in the rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """The results tree under ``root`` (the pipeline's: ``results``)."""

    root: str = "results"

    def _at(self, *parts: object) -> str:
        return "/".join((self.root, *map(str, parts)))

    # sources ------------------------------------------------------------------------------------------
    def checkpoint(self, source: str) -> str:
        """The source's BF16 checkpoint (a directory)."""
        return self._at("sources", source, "hf")

    def source_record(self, source: str) -> str:
        return self._at("sources", source, "source.json")

    def source_gguf(self, source: str) -> str:
        """The source's F16 GGUF twin."""
        return self._at("sources", source, "f16.gguf")

    # the reference likelihood (PROTOCOL A3), per source and set -----------------------------------------
    def contexts(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "contexts.parquet")

    def contexts_manifest(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "contexts.json")

    def continuations(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "continuations.parquet")

    def sampling_summary(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "sampling.json")

    def reference_scores(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "reference_scores.parquet")

    def reference_summary(self, source: str, set_name: str) -> str:
        return self._at("likelihood", source, set_name, "reference.json")

    def reference_top(self, source: str, set_name: str) -> str:
        """The source's top log-probs at every scored position (the divergence diagnostics)."""
        return self._at("likelihood", source, set_name, "reference_top.npz")

    # the accuracy reference A(p) ---------------------------------------------------------------------
    def answers_reference(self, source: str) -> str:
        return self._at("answers", source, "reference.json")

    def answers_items(self, source: str) -> str:
        return self._at("answers", source, "reference_items.parquet")

    # CompressionBench candidates and verification ------------------------------------------------------
    def candidate(self, source: str, candidate: str) -> str:
        """A baseline package the pipeline builds (a directory)."""
        return self._at("candidates", source, candidate)

    def gptq_record(self, source: str, limit: str) -> str:
        """What the GPTQ baseline for limit ``limit`` GiB tried and kept."""
        return self._at("compression", source, f"gptq-{limit}gib.json")

    def gptq_variant_record(self, source: str, variant: str) -> str:
        """What the GPTQ variant ``variant`` (compression.gptq.variants) was made with."""
        return self._at("compression", source, f"gptq-{variant}.json")

    def imatrix(self, source: str) -> str:
        """The source's importance matrix, in llama.cpp's GGUF imatrix format."""
        return self._at("compression", source, "imatrix.gguf")

    def imatrix_record(self, source: str) -> str:
        return self._at("compression", source, "imatrix.json")

    def gguf_record(self, source: str, candidate: str) -> str:
        """What llama.cpp made of the twin for a GGUF baseline (``gguf-<TYPE>[-imatrix]``): every tensor's
        type, the fallbacks."""
        return self._at("compression", source, f"{candidate}.json")

    def measured(self, source: str, candidate: str) -> str:
        """A candidate's measurement on the verification set (no storage limit applied)."""
        return self._at("compression", source, "measured", f"{candidate}.json")

    def verdict(self, task: str, candidate: str) -> str:
        """A candidate's final verification record under one task."""
        return self._at("compression", "verification", task, f"{candidate}.json")

    def reward_package(self, source: str, name: str) -> str:
        """A package built from a template by ``infbench reward``."""
        return self._at("reward", "packages", source, name)

    def reward_log(self) -> str:
        return self._at("reward_log.jsonl")

    # tables and figures --------------------------------------------------------------------------------
    def table(self, name: str, ext: str) -> str:
        """``ext``: csv, md or provenance.json."""
        return self._at("tables", f"{name}.{ext}")

    def plot(self, name: str, ext: str) -> str:
        """``ext``: png, or csv (the plotted points)."""
        return self._at("plots", f"{name}.{ext}")

    def run_table(self, name: str, ext: str) -> str:
        return self._at("tables", "runs", f"{name}.{ext}")

    def run_plot(self, name: str, ext: str) -> str:
        return self._at("plots", "runs", f"{name}.{ext}")

    # agent runs ----------------------------------------------------------------------------------------
    def reference_search(self) -> str:
        """The scripted reference search's run directory."""
        return self._at("runs", "reference-search")

    def ingested(self, run: str, name: str) -> str:
        """``name``: status.json, record.json or events.parquet."""
        return self._at("runs", "ingested", run, name)

    # ServerBench ---------------------------------------------------------------------------------------
    def synthetic_trace(self) -> str:
        return self._at("serving", "trace", "synthetic.jsonl")

    def sessions(self) -> str:
        return self._at("serving", "workload", "sessions.jsonl")

    def workload_summary(self) -> str:
        return self._at("serving", "workload", "workload.json")

    def coverage(self, ext: str) -> str:
        return self._at("serving", f"coverage.{ext}")

    def calibration_runs(self) -> str:
        return self._at("serving", "calibration", "runs")

    def targets(self) -> str:
        """The frozen latency targets and the reference baseline."""
        return self._at("serving", "calibration", "targets.json")

    def baseline(self, engine: str) -> str:
        """A further reference engine's calibration baseline, scored with the frozen targets."""
        return self._at("serving", "calibration", f"baseline_{engine}.json")

    def baseline_runs(self, engine: str) -> str:
        return self._at("serving", "calibration", f"baseline_{engine}")

    def replay(self, system: str, seed: str, ext: str) -> str:
        """A development replay: ``ext`` parquet (request records) or json (summary)."""
        return self._at("serving", "replays", system, f"seed{seed}.{ext}")

    def serving_reference(self) -> str:
        """The reference implementation's answers, EOS probes and reference log-probs for verification."""
        return self._at("serving", "reference", "verification.json")

    def server_verification(self, submission: str) -> str:
        """A server submission's verification record."""
        return self._at("serving", "verification", f"{submission}.json")

    def server_verification_runs(self, submission: str) -> str:
        """Its held-out replays' records (a directory)."""
        return self._at("serving", "verification", submission)

    # the operator --------------------------------------------------------------------------------------
    def operator_secret(self) -> str:
        """The operator's copy of the round's secret, written once every final record exists."""
        return self._at("operator", "secret.json")


LAYOUT = Layout()
