"""The figures (infbench.plots): what each shows and says, the CSV of its points, that no two of
its texts print over each other, and that the same data gives the same PNG."""

from itertools import combinations

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from runs_fixtures import TASK, compression_run, serving_run

from infbench.compression.records import EvaluationRecord
from infbench.compression.submission import GIB
from infbench.plots import accuracy_vs_bits as fig1a
from infbench.plots import serving_value_share as fig4
from infbench.plots.runs import FIGURES, layout
from infbench.runs import compression_analysis as ca
from infbench.runs import cost_analysis, ingest
from infbench.runs import serving_analysis as sa
from infbench.tables.serving import ServingRow

N_PARAMS = 134_515_008
LONG_LABEL = "run-reference-search (scripted-reference, infbench.runs.reference_search)"


def tick_labels(axis) -> list:
    """The labels of the ticks inside the view (matplotlib keeps, undrawn, one beyond each end)."""
    low, high = sorted(axis.get_view_interval())
    span = high - low
    return [t.label1 for t in axis.get_major_ticks() if low - 1e-9 * span <= t.get_loc() <= high + 1e-9 * span]


def texts(fig) -> list:
    """Every text drawn: tick labels in view, axis labels, titles, annotations, legends."""
    fig.canvas.draw()
    out = [t for t in fig.texts]
    for ax in fig.axes:
        out += [*tick_labels(ax.xaxis), *tick_labels(ax.yaxis), ax.xaxis.label, ax.yaxis.label, ax.title, *ax.texts]
        out += [*ax.get_legend().get_texts(), ax.get_legend().get_title()] if ax.get_legend() else []
    for legend in fig.legends:
        out += [*legend.get_texts(), legend.get_title()]
    return [t for t in out if t.get_visible() and t.get_text().strip()]


def overprinted(fig) -> list[tuple[str, str, tuple]]:
    """Pairs of texts whose boxes overlap by more than a pixel (boxes include the font's line gap)."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer).expanded(1, 1).padded(-1)) for t in texts(fig)]
    return [(a, b, tuple(bb.bounds)) for (a, ba), (b, bb) in combinations(boxes, 2) if ba.overlaps(bb)]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def shown(fig) -> str:
    return "\n".join(t.get_text() for t in texts(fig))


# CompressionBench, Figure 1a ---------------------------------------------------------------------


def record(
    candidate: str,
    limit: float,
    bits: float | None,
    f: float | None,
    acc: float | None,
    failed: str | None,
    source: str = "smollm2-135m",
) -> EvaluationRecord:
    return EvaluationRecord(
        kind="verification",
        submission=candidate,
        task=f"{source}-{limit}gib",
        source=source,
        limit_gib=limit,
        package_bits_per_param=bits,
        f=f,
        f_ci95=None if f is None else (f - 0.03, min(1.0, f + 0.02)),
        accuracy_mean=acc,
        accuracy_ref=0.5,
        failed_check=failed,
    )


# (name, bits per parameter, F_v, mean accuracy, failing check at 0.12 GiB, at 0.1 GiB); five near
# 4.6 bits with F_v within 0.005, the cluster the first figure printed as one smear
CANDIDATES = [
    ("bf16", 16.2, 1.0, 0.5, "storage_package", "storage_package"),
    ("gptq-4bit", 4.6, 0.93, 0.42, None, None),
    ("mixed-q4-q5", 4.62, 0.932, 0.43, None, "storage_resident"),
    ("q4-int", 4.58, 0.931, 0.2, "accuracy_gate", "accuracy_gate"),
    ("tampered", 4.61, 0.934, 0.42, "causality", "causality"),
    ("crashes", 4.59, None, None, "execution", "execution"),
    (LONG_LABEL, 5.6, 0.85, 0.33, "accuracy_gate", "accuracy_gate"),
]


def candidate_points():
    records = [
        (record(name, limit, bits, f, acc, failed), name)
        for name, bits, f, acc, *fails in CANDIDATES
        for limit, failed in zip((0.12, 0.1), fails)
    ]
    return fig1a.points(records, {"smollm2-135m": N_PARAMS})


def judged(pts, name):
    return [p for p in pts if p.candidate == name]


def test_compression_points_place_each_limit_and_number_each_candidate():
    pts = candidate_points()
    assert len(pts) == 2 * len(CANDIDATES)
    limits = {p.limit_gib: p.limit_bits_per_param for p in pts}
    assert limits == {0.1: pytest.approx(8 * 0.1 * GIB / N_PARAMS), 0.12: pytest.approx(8 * 0.12 * GIB / N_PARAMS)}
    numbers = {p.candidate: p.number for p in pts}
    assert numbers["bf16"] == 1 and sorted(numbers.values()) == list(range(1, len(CANDIDATES) + 1))
    assert [(p.f_v_ci95_low, p.f_v_ci95_high) for p in judged(pts, "gptq-4bit")] == [pytest.approx((0.9, 0.95))] * 2
    assert [p.accuracy_rel for p in judged(pts, "q4-int")] == [pytest.approx(0.4)] * 2


@pytest.mark.parametrize(
    "name, marker, text",
    [
        ("gptq-4bit", ("o", "full"), "verified"),
        ("mixed-q4-q5", ("o", "left"), "verified at 0.12 GiB; 0.1 GiB: failed storage_resident"),
        ("bf16", ("s", "none"), "failed storage_package"),
        ("q4-int", ("v", "none"), "failed accuracy_gate"),
        ("tampered", ("D", "none"), "failed causality"),
        ("crashes", ("X", "none"), "failed execution"),
    ],
)
def test_compression_marker_and_verdict_per_limit(name, marker, text):
    pts = judged(candidate_points(), name)
    assert fig1a.marker(pts) == marker and fig1a.verdict_text(pts) == text


def test_compression_figure_shows_limits_reference_gate_and_verdicts_without_overprinting():
    fig = fig1a.draw(candidate_points(), rho=0.8)
    top, bottom = fig.axes
    verticals = {
        round(line.get_xdata()[0], 6)
        for line in top.lines
        if len(line.get_xdata()) == 2 and len(set(line.get_xdata())) == 1
    }
    assert verticals == {round(8 * c * GIB / N_PARAMS, 6) for c in (0.1, 0.12)}
    horizontals = {
        line.get_ydata()[0] for line in bottom.lines if len(set(line.get_ydata())) == 1 and len(line.get_xdata()) == 2
    }
    assert {1.0, 0.8} <= horizontals
    with_f = [c for c in CANDIDATES if c[2] is not None]
    assert sum(isinstance(c, ErrorbarContainer) for c in top.containers) == len(with_f)
    text = shown(fig)
    for label in [
        "limit C = 0.1 GiB",
        "limit C = 0.12 GiB",
        "BF16 reference, F = 1",
        "gate: A >= 0.8 A(BF16)",
        "5  gptq-4bit: verified",
        "3  mixed-q4-q5: verified at 0.12 GiB; 0.1 GiB: failed storage_resident",
        "failed causality",
        LONG_LABEL,
    ]:
        assert label in text, label
    numbers = [t.get_text() for t in top.texts if t.get_text().isdigit()]
    assert sorted(numbers, key=int) == [str(n) for n in range(1, len(CANDIDATES) + 1)]
    assert LONG_LABEL not in "".join(t.get_text() for t in top.texts)  # on the panel only its number
    assert overprinted(fig) == []


def test_compression_figure_writes_its_points(tmp_path):
    pts = candidate_points()
    fig1a.plot(pts, 0.8, str(tmp_path / "f.png"), str(tmp_path / "f.csv"))
    data = pd.read_csv(tmp_path / "f.csv")
    assert list(data.columns) == list(fig1a.CandidatePoint.model_fields) and len(data) == len(pts)
    assert (tmp_path / "f.png").stat().st_size > 20_000


def test_same_data_same_png(tmp_path):
    """adjustText stops after a second of wall time by default; the figures fix its iterations."""
    pts = candidate_points()
    for name in "ab":
        fig1a.plot(pts, 0.8, str(tmp_path / f"{name}.png"), str(tmp_path / f"{name}.csv"))
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_two_sources_get_a_column_each():
    records = [
        (record(name, limit, bits, f, acc, failed, source=source), name)
        for source in ("a-27b", "b-9b")
        for name, bits, f, acc, *fails in CANDIDATES[:3]
        for limit, failed in zip((0.12, 0.1), fails)
    ]
    fig = fig1a.draw(fig1a.points(records, {"a-27b": N_PARAMS, "b-9b": N_PARAMS}), rho=0.8)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["a-27b", "b-9b"]
    assert "4  b-9b: bf16: failed storage_package" in shown(fig)
    assert overprinted(fig) == []


# ServerBench, Figure 4 ---------------------------------------------------------------------------


def serving_row(system, c, D, G, f, completed, d_ci95=None, g_ci95=None):
    """A development-table row; D None below the minimum of completed timed requests."""
    d_low, d_high = d_ci95 or (None, None)
    g_low, g_high = g_ci95 or (G, G)
    return ServingRow(
        deployment="smollm2-135m-cpu",
        system=system,
        concurrency=c,
        seeds="1000",
        D=D,
        D_at_c=f"{D} @{c}",
        d_ci95_low=d_low,
        d_ci95_high=d_high,
        G=G,
        g_ci95_low=g_low,
        g_ci95_high=g_high,
        f=f,
        p90_ttft_s=1.0,
        p90_tpot_ms=20.0,
        D_deadline=D,
        f_deadline=f,
        completed_timed_requests=completed,
        sessions=2,
        failed=0,
        counts="token ids",
    )


BASELINE = serving_row("llamacpp (calibration baseline)", 1, 0.0599, 0.0640, 0.936, 34, d_ci95=(0.05, 0.07))
BASELINE.seeds = "2000,2001"


def test_serving_points_carry_counts_and_intervals():
    few, enough = (
        serving_row("S0", 1, None, 0.063, 0.92, 3),
        serving_row("mine", 4, 0.2, 0.3, 0.667, 38, d_ci95=(0.15, 0.25), g_ci95=(0.25, 0.35)),
    )
    base, p, s = fig4.points(BASELINE, [few, enough])
    assert (base.role, base.completed_requests, p.completed_requests, s.completed_requests) == (
        fig4.BASELINE,
        34,
        3,
        38,
    )
    assert (p.D, p.D_ci95_low, s.G_ci95_low, s.D_ci95_high) == (None, None, 0.25, 0.25)


def test_serving_figure_axes_from_zero_baseline_equal_value_curves_and_counts():
    rows = [
        serving_row("S0", 1, None, 0.063, 0.92, 3),
        serving_row("llamacpp", 1, 0.061, 0.064, 0.95, 31),
        serving_row("mine", 4, 0.2, 0.3, 0.667, 38, d_ci95=(0.15, 0.25), g_ci95=(0.25, 0.35)),
    ]
    fig = fig4.draw(fig4.points(BASELINE, rows))
    (ax,) = fig.axes
    assert ax.get_xlim() == (0, 1) and ax.get_ylim()[0] == 0
    text = shown(fig)
    for label in [
        "S0: D = too few requests @1, n = 3 req, 1 seed",
        "llamacpp: D = 0.061 @1, n = 31 req",
        "llamacpp (calibration baseline): D = 0.0599 [0.05, 0.07] @1, n = 34 req, 2 seeds",
        "mine: D = 0.2 [0.15, 0.25] @4, n = 38 req",
        "D = baseline 0.0599",
        "D = 2x baseline",
    ]:
        assert label in text, label
    assert any(line.get_marker() == "*" for line in ax.lines)  # the baseline
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 3  # one G interval per system
    assert overprinted(fig) == []


def test_serving_system_that_completed_nothing_is_labelled_not_dropped():
    fig = fig4.draw(fig4.points(BASELINE, [serving_row("broken", 2, None, 0.0, None, 0)]))
    assert "broken: D = too few requests @2, n = 0 req, 1 seed (nothing completed: f undefined)" in shown(fig)


# Run analyses --------------------------------------------------------------------------------------

MODELS = {"claude-sonnet-4-5-20250929", "gpt-5-codex"}
PRICES = {
    "claude-sonnet-4-5-20250929": {"input": 3, "cache_write": 3.75, "cached": 0.3, "output": 15},
    "gpt-5-codex": {"input": 1.25, "cached": 0.125, "output": 10},
}


@pytest.fixture(scope="module")
def run_data(tmp_path_factory):
    """What each run figure draws, from two compression and three serving fixture runs."""
    root = tmp_path_factory.mktemp("runs")
    comp = [ingest.load(compression_run(root / n), known_models=MODELS, tasks={TASK}) for n in ("sonnet", "opus-4-1")]
    serv = [
        ingest.load(serving_run(root / n, c), known_models=MODELS, tasks={TASK, "smollm2-135m-cpu"})
        for n, c in [("raise", (1, 4, 8)), ("retreat", (1, 8, 4, 2)), ("flat", (2,))]
    ]
    paths, points = sa.concurrency_paths(serv, 600)
    costs = cost_analysis.cost(comp + serv, PRICES)
    verified = EvaluationRecord(
        kind="verification",
        submission="run-sonnet",
        task=TASK,
        source="smollm2-135m",
        limit_gib=0.1,
        package_bits_per_param=5.6,
        ppl=24.0,
        accuracy_mean=0.4,
        accuracy_ref=0.5,
    )
    return {
        "best_so_far": ca.best_so_far(comp),
        "outcomes": ca.outcomes(comp, 0.002),
        "ranking_pairs": ca.ranking_pairs(comp, 0.002),
        "revisions": ca.revisions(comp, 0.01),
        "stopping": ca.stopping(comp),
        "concurrency_paths": points,
        "first_usable_replay": sa.first_usable(serv, 600),
        "matched_seeds": sa.matched_seeds(serv),
        "cost": costs,
        "frontier": cost_analysis.frontier(costs, {"sonnet": verified, "opus-4-1": verified}),
    }


@pytest.mark.parametrize("name", list(FIGURES))
def test_run_figure_prints_nothing_over_anything(run_data, name):
    fig = FIGURES[name].draw(run_data[name])
    assert overprinted(fig) == []
    for ax in fig.axes:  # a legend sits beside the data, never on it
        if ax.get_legend():
            assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent()), name


@pytest.mark.parametrize("name", list(FIGURES))
def test_run_figure_without_runs_says_so(name):
    fig = FIGURES[name].draw([])
    assert "no " in shown(fig) and all(not ax.axison for ax in fig.axes)


def test_run_figures_name_what_they_show(run_data):
    by = {name: shown(FIGURES[name].draw(run_data[name])) for name in FIGURES}
    for p in run_data["concurrency_paths"]:
        assert f"{p.run} ({p.classification})" in by["concurrency_paths"]
    assert "raise (raise & hold)" in by["concurrency_paths"]
    assert "minutes" in by["concurrency_paths"] and "hours" not in by["concurrency_paths"]  # runs of under 2 h
    assert "2 of 4 reversed" in by["ranking_pairs"]
    assert by["outcomes"].split("\n").count("Q1") == 2 and "opus-4-1" in by["outcomes"]
    assert "sonnet (failed" not in by["frontier"] and "verified PPL rank" in by["frontier"]


def test_time_unit_fits_the_longest_run():
    assert layout.time_unit([0.004, 0.008]) == (3600.0, "seconds")
    assert layout.time_unit([0.5]) == (60.0, "minutes")
    assert layout.time_unit([3.2, None]) == (1.0, "hours")


def test_first_usable_replay_marks_a_run_without_one(run_data):
    rows = [
        r.model_copy(update={"first_usable_h": None, "first_usable_active_h": None}) if r.run == "flat" else r
        for r in run_data["first_usable_replay"]
    ]
    assert "none (" in shown(FIGURES["first_usable_replay"].draw(rows))


def test_cost_axis_has_no_crowded_ticks(run_data):
    fig = FIGURES["cost"].draw(run_data["cost"])
    assert len(fig.axes[0].get_xticklabels()) <= 7 and overprinted(fig) == []


def test_every_plotted_analysis_has_its_figure():
    from infbench.runs.outputs import PLOTTED

    assert list(FIGURES) == PLOTTED
