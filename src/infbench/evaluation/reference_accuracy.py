"""The source's reference accuracy ``A(p)``, computed once per source and frozen.

``results/answers/<source>/reference.json`` is the :class:`AnswerResults` of
the BF16 source checkpoint through transformers; ``reference_items.parquet``
holds its per-item records. Candidates read it (``results.read_json``) and
are compared with it by ``driver.gate`` (``driver.gate_candidate`` does both),
which refuses a candidate evaluated on other questions or settings.
"""

from __future__ import annotations

from pathlib import Path

import torch

from infbench import provenance
from infbench.config.model import AnswerSettings, SandboxSettings
from infbench.evaluation import results
from infbench.evaluation.driver import evaluate
from infbench.evaluation.generation import load_hf_generate_fn
from infbench.evaluation.questions import load_questions
from infbench.hashing import file_hashes, sha256_text


def compute_reference(
    source: str,
    checkpoint: str | Path,
    settings: AnswerSettings,
    out_json: str | Path,
    out_items: str | Path,
    *,
    question_seed: int,
    sandbox: SandboxSettings,
    secret_label: str | None = None,
    threads: int | None = None,
) -> results.AnswerResults:
    """Evaluate the source checkpoint on the questions ``question_seed`` draws; write the frozen reference.
    ``sandbox``: where its HumanEval programs are judged; ``secret_label``: the operator secret the seed came
    from, for the record."""
    if threads:
        torch.set_num_threads(threads)
    generate_fn = load_hf_generate_fn(str(checkpoint), settings.dtype, settings.device)
    reference = evaluate(
        generate_fn, load_questions(settings, seed=question_seed), settings, label=source, sandbox=sandbox
    )
    reference.secret_label = secret_label
    weights = sha256_text("".join(f"{k}:{v}\n" for k, v in file_hashes(checkpoint).items()))
    reference.provenance = provenance.collect(
        {"source": source, **settings.model_dump(mode="json")}, {"checkpoint": weights}
    )
    results.write_items_parquet(out_items, reference)
    results.write_json(out_json, reference)
    return reference
