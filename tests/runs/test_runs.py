"""Run records (docs/runs.md): schema, adapters on small fixtures (malformed ones included),
ingestion with bad inputs, and the trajectory analyses' rules."""

import json
import math

import pandas as pd
import pytest
from pydantic import ValidationError
from runs_fixtures import (
    TASK,
    at,
    claude_code_lines,
    codex_lines,
    compression_run,
    reward_line,
    serving_run,
    write_jsonl,
)

from infbench.runs import compression_analysis as ca
from infbench.runs import cost_analysis, ingest, reward_log, transcripts
from infbench.runs import serving_analysis as sa
from infbench.runs.jsonl import RunError
from infbench.runs.schema import RunRecord, RunSpec, RunStatus, TokenUsage, ToolCall

MODELS = {"claude-sonnet-4-5-20250929", "gpt-5-codex", "scripted-reference"}
PRICES = {
    "claude-sonnet-4-5-20250929": {"input": 3, "cache_write": 3.75, "cached": 0.3, "output": 15},
    "gpt-5-codex": {"input": 1.25, "cached": 0.125, "output": 10},
}


def load(run):
    return ingest.load(run, known_models=MODELS, tasks={TASK})


# schema -------------------------------------------------------------------------------------


def test_run_spec_needs_utc_times_and_known_fields():
    spec = {
        "agent": {"model": "m", "scaffold": "s"},
        "track": "compression",
        "task": "t",
        "budget_hours": 1,
        "start": "2026-01-05T09:00:00Z",
        "end": "2026-01-05T10:00:00Z",
        "final_submission": "final",
    }
    assert RunSpec.model_validate(spec).schema_version == 1
    with pytest.raises(ValidationError, match="UTC offset"):
        RunSpec.model_validate({**spec, "start": "2026-01-05T09:00:00"})
    with pytest.raises(ValidationError, match="extra"):
        RunSpec.model_validate({**spec, "agent": {"model": "m", "scaffold": "s", "colour": "red"}})


def test_record_round_trips_through_json(tmp_path):
    record = load(compression_run(tmp_path / "r"))
    assert RunRecord.model_validate_json(record.model_dump_json()) == record
    times = [e.time for e in record.events]
    assert times == sorted(times)


# adapters -----------------------------------------------------------------------------------


def test_reward_log_lines_become_reward_calls(tmp_path):
    path = write_jsonl(
        tmp_path / "reward_log.jsonl", [reward_line(1, "a", "h1", 7.0, 38.0), reward_line(2, "b", "h2", 0.0, 30.0)]
    )
    calls = reward_log.events(path)
    assert [(c.submission, c.reward, c.failed_check) for c in calls] == [
        ("a", 7.0, None),
        ("b", 0.0, "storage_package"),
    ]


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda text: text[:-40], "reward_log.jsonl:2: truncated line"),
        (
            lambda text: text.replace('"finished_at": "2026-01-05T09:02:00+00:00"', '"finished_at": null'),
            "reward_log.jsonl:2: a reward record needs 'finished_at'",
        ),
        (lambda text: text.replace("09:02:00", "08:59:00"), "reward_log.jsonl:2: event out of order"),
        (
            lambda text: text.replace('"wall_s": 42.0', '"wall_s": "slow"', 1),
            "reward_log.jsonl:1: not a reward record: field 'wall_s'",
        ),
    ],
    ids=["truncated", "no-time", "out-of-order", "bad-field"],
)
def test_malformed_reward_log_names_file_and_line(tmp_path, mangle, message):
    path = write_jsonl(
        tmp_path / "reward_log.jsonl", [reward_line(1, "a", "h1", 7.0, 38.0), reward_line(2, "b", "h2", 6.0, 40.0)]
    )
    path.write_text(mangle(path.read_text()))
    with pytest.raises(RunError, match=message.replace("(", r"\(")):
        reward_log.events(path)


def test_claude_code_counts_each_message_once_and_its_tool_calls(tmp_path):
    found = transcripts.claude_code(write_jsonl(tmp_path / "s.jsonl", claude_code_lines()))
    usage = [e for e in found if isinstance(e, TokenUsage)]
    assert [(u.input, u.cache_write, u.cached, u.output) for u in usage] == [(10, 2000, 0, 50), (4, 100, 2000, 300)]
    assert usage[0].model == "claude-sonnet-4-5-20250929"
    assert usage[0].time.isoformat() == at(2)  # the message's first line
    assert sorted(e.name for e in found if isinstance(e, ToolCall)) == ["Bash", "Edit"]


def test_codex_uses_last_usage_or_the_difference_of_totals(tmp_path):
    found = transcripts.codex(write_jsonl(tmp_path / "rollout.jsonl", codex_lines()))
    usage = [e for e in found if isinstance(e, TokenUsage)]
    assert [(u.model, u.input, u.cached, u.output) for u in usage] == [
        ("gpt-5-codex", 800, 200, 80),
        ("gpt-5-codex", 1000, 1000, 20),
    ]
    assert [e.name for e in found if isinstance(e, ToolCall)] == ["shell"]


@pytest.mark.parametrize(
    "reader, lines, edit, message",
    [
        (
            transcripts.claude_code,
            claude_code_lines,
            lambda ls: ls[:2] + ['{"type": "assistant", "mess'],
            "s.jsonl:3: truncated line",
        ),
        (
            transcripts.claude_code,
            claude_code_lines,
            lambda ls: [ls[0], {**ls[2], "timestamp": "yesterday"}],
            "s.jsonl:2: 'timestamp' is 'yesterday'",
        ),
        (
            transcripts.claude_code,
            claude_code_lines,
            lambda ls: [
                ls[2],
                {**ls[4], "message": {**ls[4]["message"], "usage": {"input_tokens": -1, "output_tokens": 1}}},
            ],
            "s.jsonl:2: usage field 'input_tokens' is -1",
        ),
        (
            transcripts.codex,
            codex_lines,
            lambda ls: [ls[1], ls[3], ls[4] | {"timestamp": at(2)}],
            "s.jsonl:3: event out of order",
        ),
        (
            transcripts.codex,
            codex_lines,
            lambda ls: [
                ls[1],
                {
                    **ls[4],
                    "payload": {
                        "type": "token_count",
                        "info": {"last_token_usage": {"input_tokens": 5, "cached_input_tokens": 9, "output_tokens": 1}},
                    },
                },
            ],
            "s.jsonl:2: cached_input_tokens 9 exceed",
        ),
    ],
    ids=["claude-truncated", "claude-bad-time", "claude-negative", "codex-order", "codex-cached"],
)
def test_malformed_transcripts_name_file_and_line(tmp_path, reader, lines, edit, message):
    path = tmp_path / "s.jsonl"
    edited = edit(lines())
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in edited).rstrip("\n")
        + ("" if isinstance(edited[-1], str) else "\n")
    )
    with pytest.raises(RunError, match=message):
        reader(path)


# ingestion ----------------------------------------------------------------------------------


def test_compression_run_ingests_every_source(tmp_path):
    record = load(compression_run(tmp_path / "r"))
    kinds = [e.type for e in record.events]
    assert kinds.count("reward") == 4 and kinds.count("version") == 3 and kinds.count("completion") == 2
    assert kinds.count("tokens") == 4 and kinds.count("tool_call") == 4


def _ingest(run, tmp_path):
    out = tmp_path / "out"
    return ingest.ingest(
        run,
        run.name,
        known_models=MODELS,
        tasks={TASK},
        candidate=None,
        status_path=str(out / "status.json"),
        record_path=str(out / "record.json"),
        events_path=str(out / "events.parquet"),
    ), out


@pytest.mark.parametrize(
    "damage, reason",
    [
        (
            lambda r: __import__("shutil").rmtree(r / "final"),
            "run.yaml: field 'final_submission': no manifest.yaml in final",
        ),
        (
            lambda r: (r / "reward_log.jsonl").write_text((r / "reward_log.jsonl").read_text()[:-30]),
            "reward_log.jsonl:4: truncated line",
        ),
        (
            lambda r: (r / "events.jsonl").write_text((r / "events.jsonl").read_text().replace(at(100), at(20))),
            "events.jsonl:3: event out of order",
        ),
        (
            lambda r: (r / "run.yaml").write_text(
                (r / "run.yaml").read_text().replace("claude-sonnet-4-5-20250929", "gpt-9")
            ),
            "run.yaml: field 'agent.model': unknown agent 'gpt-9'",
        ),
        (
            lambda r: (r / "run.yaml").write_text((r / "run.yaml").read_text().replace(at(120), at(80))),
            "is outside the run's start..end",
        ),
    ],
    ids=["missing-final", "truncated-log", "out-of-order", "unknown-agent", "after-end"],
)
def test_bad_run_is_reported_not_ingested_with_the_reason(tmp_path, damage, reason):
    import pyarrow.parquet as pq

    run = compression_run(tmp_path / "r")
    damage(run)
    status, out = _ingest(run, tmp_path)
    assert not status.ingested and reason in status.reason
    assert RunStatus.model_validate_json((out / "status.json").read_text()) == status
    assert pq.read_table(out / "events.parquet").num_rows == 0
    assert ingest.check(run, known_models=MODELS, tasks={TASK}) == status.reason


def test_ingested_run_writes_status_record_and_events_table(tmp_path):
    import pyarrow.parquet as pq

    status, out = _ingest(compression_run(tmp_path / "r"), tmp_path)
    assert status.ingested and status.events == 17
    table = pq.read_table(out / "events.parquet").to_pandas()
    assert len(table) == 17 and table["t_hours"].is_monotonic_increasing
    assert RunRecord.model_validate_json((out / "record.json").read_text()).run == "r"


# compression analyses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reward, best, expected",
    [
        (7.0, None, "new best"),
        (7.003, 7.0, "new best"),
        (7.002, 7.0, "same as best"),
        (6.998, 7.0, "same as best"),
        (6.99, 7.0, "worse"),
        (0.0, 7.0, "worse"),
    ],
)
def test_outcome_classes(reward, best, expected):
    assert ca.outcome(reward, best, 0.002) == expected


def test_compression_analyses_on_the_fixture_run(tmp_path):
    record = load(compression_run(tmp_path / "r"))
    best = ca.best_so_far([record])
    assert [r.best_ppl for r in best] == [38.0, 38.0, 38.0, 35.0]
    rows = {r.quarter: (r.new_best, r.same_as_best, r.worse) for r in ca.outcomes([record], 0.002)}
    assert rows == {1: (1, 0, 1), 2: (0, 1, 0), 3: (1, 0, 0), 4: (0, 0, 0)}
    pairs = ca.ranking_pairs([record], 0.002)
    assert [(p.before, p.after, p.local_prefers, p.verdict) for p in pairs] == [
        ("v1", "v2", "v2", "reversed"),
        ("v2", "v3", "v3", "confirmed"),
    ]
    stop = ca.stopping([record])[0]
    assert stop.first_completion_h == pytest.approx(50 / 60) and stop.last_weight_change_h == pytest.approx(1.0)
    assert stop.declared_before_last_change and stop.gap_h == pytest.approx(10 / 60)


def test_revision_effect_and_size_band(tmp_path):
    record = load(compression_run(tmp_path / "r"))
    revs = ca.revisions([record], 0.01)
    e = [math.log(p / 27.0) for p in (38.0, 45.0, 38.0, 35.0)]
    assert [r.effect_pct for r in revs] == pytest.approx([100 * (e[i + 1] / e[i] - 1) for i in range(3)])
    assert [r.size_band for r in revs] == ["within band", "within band", "size changed"]


def test_stopping_without_completion_or_versions(tmp_path):
    run = compression_run(tmp_path / "r")
    (run / "events.jsonl").unlink()
    __import__("shutil").rmtree(run / "versions")
    row = ca.stopping([load(run)])[0]
    assert row.first_completion_h is None and row.declared_before_last_change is None
    assert row.last_weight_change_h == pytest.approx(70 / 60)  # from the reward calls' packages


# serving analyses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, expected",
    [
        ([], "never tuned"),
        ([4], "never tuned"),
        ([4, 4], "never tuned"),
        ([1, 2, 4], "raise & hold"),
        ([1, 8], "raise & hold"),
        ([1, 8, 4], "retreat"),
        ([8, 4, 2], "retreat"),
        ([1, 4, 8, 4, 2], "retreat"),
        ([1, 8, 4, 8], "oscillate"),
        ([8, 4, 8], "oscillate"),
        ([1, 4, 2, 4, 2], "oscillate"),
    ],
)
def test_concurrency_path_classes(values, expected):
    assert sa.classify(values) == expected


def test_serving_analyses_on_the_fixture_run(tmp_path):
    record = load(serving_run(tmp_path / "s"))
    rows, points = sa.concurrency_paths([record], idle_gap_s=600)
    assert (rows[0].path, rows[0].classification) == ("1 > 4 > 8", "raise & hold")
    assert [p.concurrency for p in points] == [1, 4, 8]
    assert points[0].active_h == pytest.approx(10 / 60)
    usable = sa.first_usable([record], idle_gap_s=600)[0]
    assert usable.first_usable_h == pytest.approx(45 / 60)  # the first replay had no qualified value (D = 0)
    assert usable.first_usable_active_h == pytest.approx(40 / 60)  # the 30..45 gap counts as 10 minutes
    matched = sa.matched_seeds([record])
    assert [(m.seed, m.d_ratio, m.g_ratio, m.f_ratio) for m in matched] == [(0, 1.5, 2.0, pytest.approx(1.2))]


def test_active_time_caps_idle_gaps(tmp_path):
    record = load(serving_run(tmp_path / "s"))
    # start 0, events at 10, 15, 20, 30, 45, 90, end 120: gaps of 15, 45 and 30 minutes count as 10
    assert sa.active_hours(record, record.spec.end, idle_gap_s=600) == pytest.approx(60 / 60)


def test_retreating_serving_run(tmp_path):
    record = load(serving_run(tmp_path / "s", concurrencies=(1, 16, 4)))
    # replays at concurrency 1 and 8 interleave: 1 (10) 16 (20) 4 (30) 8 (45)
    assert sa.concurrency_paths([record], 600)[0][0].classification == "oscillate"


# cost ---------------------------------------------------------------------------------------


def test_cost_prices_each_transcript_model(tmp_path):
    record = load(compression_run(tmp_path / "r"))
    row = cost_analysis.cost([record], PRICES)[0]
    assert (row.input_tokens, row.cache_write_tokens, row.cached_tokens, row.output_tokens) == (1814, 2100, 3200, 450)
    claude = (14 * 3 + 2100 * 3.75 + 2000 * 0.3 + 350 * 15) / 1e6
    codex = (1800 * 1.25 + 1200 * 0.125 + 100 * 10) / 1e6
    assert row.cost_usd == pytest.approx(claude + codex)
    assert row.evaluator_calls == 4 and row.tool_calls == 4 and row.unpriced_models == ""


def test_report_writes_every_table_and_plot(tmp_path):
    from infbench.plots import runs as figures
    from infbench.runs import outputs, report

    records, statuses = [], []
    for name, build in [("c", compression_run), ("s", serving_run)]:
        status, out = _ingest(build(tmp_path / name), tmp_path / f"o-{name}")
        statuses.append(str(out / "status.json"))
        records.append(str(out / "record.json"))
    bad = compression_run(tmp_path / "bad")
    (bad / "run.yaml").unlink()
    status, out = _ingest(bad, tmp_path / "o-bad")
    statuses.append(str(out / "status.json"))
    records.append(str(out / "record.json"))
    tables = {n: {k: str(tmp_path / f"t/{n}.{k}") for k in ("csv", "md", "provenance")} for n in outputs.ANALYSES}
    plots = {n: {"png": str(tmp_path / f"p/{n}.png"), "csv": str(tmp_path / f"p/{n}.csv")} for n in outputs.PLOTTED}
    data = report.write(
        statuses,
        records,
        {},
        tables=tables,
        settings={"outcome_tolerance": 0.002, "size_band_gib": 0.01, "idle_gap_minutes": 10, "prices": PRICES},
    )
    figures.write(data, plots)
    assert all((tmp_path / f"p/{n}.png").stat().st_size > 0 for n in outputs.PLOTTED)
    paths = pd.read_csv(tmp_path / "p/concurrency_paths.csv")  # the plotted points, each with its run's class
    assert list(paths["concurrency"]) == [1, 4, 8] and set(paths["classification"]) == {"raise & hold"}
    status_md = (tmp_path / "t/status.md").read_text()
    assert "run.yaml: missing" in status_md and status_md.count("True") == 2
    assert "raise & hold" in (tmp_path / "t/concurrency_paths.csv").read_text()
    assert "(no rows)" in (tmp_path / "t/frontier.md").read_text()


def test_check_run_cli_prints_events_or_the_reason(tmp_path, capsys):
    from infbench.cli import main

    run = compression_run(tmp_path / "r")
    config = str(__import__("conftest").REPO / "config/config.yaml")
    assert main(["check-run", str(run), "--config", config]) == 0
    assert json.loads(capsys.readouterr().out)["events"]["reward"] == 4
    (run / "versions/v2.json").write_text("{}")
    assert main(["check-run", str(run), "--config", config]) == 2
    assert "v2.json: field 'published_at': Field required" in capsys.readouterr().err


def test_replay_log_cli_appends_a_line_the_adapter_reads(tmp_path, capsys):
    from infbench.cli import main
    from infbench.runs import replay_log

    summary = tmp_path / "seed1000.json"
    summary.write_text(
        json.dumps(
            {
                "server": "S0",
                "concurrency": 2,
                "seed": 1000,
                "records": "x.parquet",
                "score": {"D": 0.1, "G": 0.3, "f": 1 / 3, "completed": 7, "window_s": 30},
            }
        )
    )
    server = tmp_path / "server"
    server.mkdir()
    (server / "launch.sh").write_text("#!/bin/sh\n")
    log = tmp_path / "run/replay_log.jsonl"
    for _ in range(2):
        assert main(["replay-log", str(summary), "--server", str(server), "--log", str(log), "--wall-s", "50"]) == 0
    calls = replay_log.events(log)
    assert [(c.concurrency, c.seed, c.D, c.completed) for c in calls] == [(2, 1000, 0.1, 7)] * 2
    summary.write_text("{}")
    assert main(["replay-log", str(summary), "--server", str(server), "--log", str(log), "--wall-s", "50"]) == 2
    assert "seed1000.json: not a replay summary: field 'server'" in capsys.readouterr().err
