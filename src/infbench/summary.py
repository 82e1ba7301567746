"""What a run found, in a few lines: printed by the workflow's ``onsuccess`` and by ``infbench summary``.

From the tables that exist under ``results/tables/`` (a partial run may have made none of them): the count of
each verdict and the best verified score per task (``compression.csv``), the count of each verdict and each
verified system's D with its 95% interval at its concurrency (``serving_verified.csv``), each system's D of the
development seeds (``serving.csv``, unverified), then where the tables and the report are."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, get_args

from pydantic import BaseModel, ValidationError

from infbench.layout import Layout
from infbench.tables.compression import CompressionRow
from infbench.tables.serving import ServingRow
from infbench.tables.serving_verified import VerifiedRow

R = TypeVar("R", bound=BaseModel)


def _rows(path: Path, model: type[R]) -> list[R]:
    """The table's rows: an empty cell is None where the column may be None, else the empty string."""
    optional = {name for name, field in model.model_fields.items() if type(None) in get_args(field.annotation)}
    with path.open(newline="") as f:
        return [
            model.model_validate({k: None if v == "" and k in optional else v for k, v in r.items()})
            for r in csv.DictReader(f)
        ]


def _verdicts(verdicts: list[str]) -> list[str]:
    return [f"  {n} {verdict}" for verdict, n in sorted(Counter(verdicts).items())]


def _compression(rows: list[CompressionRow]) -> list[str]:
    lines = _verdicts([r.verdict for r in rows])
    best: dict[str, CompressionRow] = {}
    for r in rows:
        if r.verdict.startswith("verified") and (r.task not in best or r.score > best[r.task].score):
            best[r.task] = r
    for task in sorted({r.task for r in rows}):
        r = best.get(task)
        lines.append(
            f"  best verified on {task}: {r.method}, score {r.score:.3g} (f_v {r.f_v:.3g}, {r.package_gib:.3g} GiB)"
            if r
            else f"  best verified on {task}: none"
        )
    return lines


def _verified(rows: list[VerifiedRow]) -> list[str]:
    scored = [r for r in rows if r.verdict.startswith(("verified", "reference"))]
    return _verdicts([r.verdict for r in rows]) + [_served(r) for r in scored]


def _development(rows: list[ServingRow]) -> list[str]:
    return [_served(r) for r in rows]


def _served(r: ServingRow | VerifiedRow) -> str:
    """``D [low, high] @c``, or why the row has no D (too few requests, a failed check)."""
    return f"  {r.system}: {'' if r.D is None else 'D '}{r.D_at_c}"


# table name, row model, title, its lines
TABLES: list[tuple[str, type[BaseModel], str, Callable[[list], list[str]]]] = [
    ("compression", CompressionRow, "CompressionBench", _compression),
    ("serving_verified", VerifiedRow, "ServerBench, verified on the final seeds", _verified),
    ("serving", ServingRow, "ServerBench, development seeds (unverified)", _development),
]


def lines(root: str = "results") -> list[str]:
    """The summary of the results tree at ``root``; tables that are missing are left out."""
    out = []
    for name, model, title, describe in TABLES:
        path = Path(Layout(root).table(name, "csv"))
        if not path.exists():
            continue
        try:
            rows = _rows(path, model)
        except ValidationError as error:  # e.g. a table an older version wrote: the summary never stops a run
            first = error.errors()[0]
            out.append(f"{title} ({path}): not summarised ({'.'.join(map(str, first['loc']))}: {first['msg']})")
            continue
        out += [f"{title} ({path}, {len(rows)} rows):", *describe(rows)]
    if out:
        out.append(f"Tables: {Path(root) / 'tables'}/ (csv, md); the report: `make report` writes report.html")
    return out


def print_summary(root: str = "results") -> None:
    for line in lines(root):
        print(line)
