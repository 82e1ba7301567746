"""Writing a table of typed rows as CSV, Markdown and a provenance sidecar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance


def write_table(
    rows: Sequence[BaseModel],
    *,
    csv_path: str,
    md_path: str,
    provenance_path: str,
    params: dict[str, Any],
    config: dict[str, Any],
    inputs: dict[str, str],
    float_format: str = "%.6g",
    md_notes: Sequence[str] = (),
) -> pd.DataFrame:
    """Write ``rows``; the sidecar records ``params``, the config sections that
    produced the table (seeds included), the sha256 of every input file, package
    versions, the git commit and where it ran. ``md_notes``: lines under the Markdown table."""
    frame = pd.DataFrame([r.model_dump() for r in rows])
    atomic.write_text(csv_path, frame.to_csv(index=False, float_format=float_format, lineterminator="\n"))
    notes = "".join(f"\n{line}\n" for line in md_notes)
    atomic.write_text(md_path, frame.to_markdown(index=False, floatfmt=float_format.lstrip("%")) + "\n" + notes)
    record = provenance.collect({**params, "config": config}, inputs)
    atomic.write_json(provenance_path, record.model_dump(mode="json"))
    return frame
