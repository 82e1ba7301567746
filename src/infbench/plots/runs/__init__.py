"""The run analyses' figures (``results/plots/runs/<name>.{png,csv}``), one module per figure; each
has ``plot(rows, png_path, csv_path)`` and writes the points it draws as the CSV."""

from infbench.plots.runs import (
    best_so_far,
    concurrency_paths,
    cost,
    first_usable_replay,
    frontier,
    matched_seeds,
    outcomes,
    ranking_pairs,
    revisions,
    stopping,
)

FIGURES = {
    "best_so_far": best_so_far,
    "outcomes": outcomes,
    "ranking_pairs": ranking_pairs,
    "revisions": revisions,
    "stopping": stopping,
    "concurrency_paths": concurrency_paths,
    "first_usable_replay": first_usable_replay,
    "matched_seeds": matched_seeds,
    "cost": cost,
    "frontier": frontier,
}


def write(data: dict[str, list], plots: dict[str, dict[str, str]]) -> None:
    """``data[name]``: the rows the figure draws (:func:`infbench.runs.report.write` returns them);
    ``plots[name]`` = {png, csv}."""
    for name, module in FIGURES.items():
        module.plot(data[name], plots[name]["png"], plots[name]["csv"])
