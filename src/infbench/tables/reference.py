"""``results/tables/reference.{csv,md}``: the BF16 reference PPL per source and set, and what each set was
drawn from (``drawn_from``: the search set's public seeds, the verification set's operator secret, e.g.
``public demo``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from infbench.compression.likelihood_files import ReferenceSummary, SamplingSummary
from infbench.hashing import sha256_file
from infbench.sources import read_record
from infbench.tables.io import write_table


class ReferenceRow(BaseModel):
    source: str
    set: str
    n_params: int
    contexts: int
    context_tokens: int
    tokens_scored: int
    ppl: float
    ppl_sampler: float
    f_self: float
    f_self_ci95_low: float
    f_self_ci95_high: float
    dtype: str
    backend: str
    drawn_from: str


def rows(records: list[str], sampling: list[str], reference: list[str]) -> list[ReferenceRow]:
    params = {r.name: r.n_params for r in map(read_record, records)}
    samp = {(s.source, s.set): s for s in (SamplingSummary.model_validate_json(Path(p).read_text()) for p in sampling)}
    out = []
    for path in reference:
        ref = ReferenceSummary.model_validate_json(Path(path).read_text())
        s = samp[(ref.source, ref.set)]
        out.append(
            ReferenceRow(
                source=ref.source,
                set=ref.set,
                n_params=params[ref.source],
                contexts=ref.n_contexts,
                context_tokens=s.context_tokens,
                tokens_scored=ref.tokens_scored,
                ppl=ref.ppl,
                ppl_sampler=s.ppl,
                f_self=ref.f_self,
                f_self_ci95_low=ref.f_self_ci95[0],
                f_self_ci95_high=ref.f_self_ci95[1],
                dtype=ref.dtype,
                backend=ref.backend,
                drawn_from=ref.secret_label or "public seeds",
            )
        )
    return sorted(out, key=lambda r: (r.source, r.set))


def write(
    records: list[str],
    sampling: list[str],
    reference: list[str],
    *,
    csv_path: str,
    md_path: str,
    provenance_path: str,
    config: dict,
) -> None:
    inputs = {p: sha256_file(p) for p in [*records, *sampling, *reference]}
    write_table(
        rows(records, sampling, reference),
        csv_path=csv_path,
        md_path=md_path,
        provenance_path=provenance_path,
        params={"table": "reference"},
        config=config,
        inputs=inputs,
    )
