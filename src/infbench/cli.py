"""``infbench``: the pipeline's stages from a shell, without Snakemake."""

from __future__ import annotations

import argparse
import json
import sys

from infbench.errors import InfbenchError


def _bench(args) -> None:
    from infbench.bench import likelihood as bench

    print(bench.run(args.model, contexts=args.contexts, context_tokens=args.context_tokens,
                    continuation_tokens=args.continuation_tokens, batch_sizes=args.batch_sizes,
                    sample_contexts=args.sample_contexts or args.contexts, sample_batch_size=args.sample_batch_size,
                    dtype=args.dtype, repeats=args.repeats, device=args.device, threads=args.threads,
                    out_md=args.out))


def _bench_replay(args) -> None:
    from infbench.bench import replay as bench

    print(bench.run(tuple(args.concurrency), window_s=args.window, input_tokens=args.input_tokens,
                    output_tokens=args.output_tokens, think_time_s=args.think_time, out_md=args.out))


def _bench_stages(args) -> None:
    from infbench.bench import compression_stages as bench

    print(bench.run(args.config, args.out_dir, device=args.device,
                    origin=json.loads(args.origin) if args.origin else None, contexts_from=args.contexts_from,
                    compare=args.compare, likelihood_only=args.likelihood_only, threads=args.threads))


def _source(args) -> None:
    from infbench import sources

    origin = json.loads(args.origin)
    record = sources.materialize(args.name, origin, args.out_dir, args.record, dtype=args.dtype)
    print(f"{record.name}: {record.n_params:,} parameters -> {args.out_dir}")


def _reward(args) -> None:
    from pathlib import Path

    from infbench.compression import tasks, verification
    from infbench.compression.baselines.package import from_template
    from infbench.config_io import load_config
    from infbench.errors import ConfigError

    config = load_config(args.config)
    known = tasks.tasks(config)
    if args.task not in known:
        raise ConfigError("--task", f"unknown task '{args.task}' (tasks in {args.config}: {', '.join(known)})")
    package = from_template(args.submission, Path(args.results), known[args.task].source)
    record = verification.reward(str(package), known[args.task], results=Path(args.results),
                                 settings=config["verification"], sandbox=config["sandbox"], threads=args.threads,
                                 log_path=Path(args.log))
    summary = {k: getattr(record, k) for k in ("task", "submission", "reward", "f", "ppl", "s_pkg_bytes",
                                               "s_res_bytes", "failed_check", "failure", "wall_s")}
    summary["tps"] = record.decode.tps if record.decode else None
    print(json.dumps(summary, indent=2))


def _check_run(args) -> None:
    from collections import Counter

    from infbench.compression import tasks
    from infbench.config_io import load_config
    from infbench.runs import ingest

    config = load_config(args.config)
    record = ingest.load(args.run_dir, known_models=set(config["runs"]["prices"]), tasks=set(tasks.tasks(config)))
    print(json.dumps({"run": record.run, "agent": record.spec.agent.model_dump(), "task": record.spec.task,
                      "events": dict(Counter(e.type for e in record.events))}, indent=2))


def _replay_log(args) -> None:
    from infbench.runs import replay_log

    call = replay_log.append(args.summary, args.server, args.log, args.wall_s)
    print(call.model_dump_json(indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infbench")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("source", help="materialize a source model as a BF16 checkpoint")
    p.add_argument("name")
    p.add_argument("--origin", required=True, help='JSON, e.g. {"type": "local", "path": "model.gguf"}')
    p.add_argument("--out-dir", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--dtype", default="bfloat16")
    p.set_defaults(func=_source)

    p = sub.add_parser("bench-likelihood", help="scorer vs bare forward throughput, and sampling throughput, "
                                               "against the device's measured matmul rate and copy bandwidth")
    p.add_argument("model", help="a checkpoint directory, or random:NAME (random weights: "
                                 "random:llama-1b, random:smollm2-135m)")
    p.add_argument("--contexts", type=int, default=16, help="contexts scored")
    p.add_argument("--context-tokens", type=int, default=128)
    p.add_argument("--continuation-tokens", type=int, default=256)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8], help="scorer batch sizes")
    p.add_argument("--sample-contexts", type=int, default=None, help="contexts sampled (default: --contexts)")
    p.add_argument("--sample-batch-size", type=int, default=None,
                   help="default: chosen by memory on CUDA, the largest --batch-sizes on the CPU")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench)

    p = sub.add_parser("reward", help="search-time reward of a submission (10 F_s, or 0), appended to a JSONL log; "
                                     "a template such as examples/starter_submission is first packed with the "
                                     "task's source checkpoint")
    p.add_argument("submission")
    p.add_argument("--task", required=True, help="e.g. smollm2-135m-0.1gib (source-<limit>gib)")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default="results", help="the pipeline's results directory")
    p.add_argument("--log", default="results/reward_log.jsonl")
    p.add_argument("--threads", type=int, default=2)
    p.set_defaults(func=_reward)
    p = sub.add_parser("check-run", help="validate a run directory (docs/runs.md) as the pipeline ingests it")
    p.add_argument("run_dir")
    p.add_argument("--config", default="config/config.yaml")
    p.set_defaults(func=_check_run)
    p = sub.add_parser("replay-log", help="append a replay's score to a run's replay_log.jsonl (docs/runs.md)")
    p.add_argument("summary", help="a replay summary JSON (e.g. results/serving/replays/<system>/seed<seed>.json)")
    p.add_argument("--server", required=True, help="the server's code and configuration directory (hashed)")
    p.add_argument("--log", required=True, help="e.g. runs/<name>/replay_log.jsonl")
    p.add_argument("--wall-s", type=float, required=True, help="seconds the replay took")
    p.set_defaults(func=_replay_log)
    p = sub.add_parser("bench-replay", help="latency and CPU the replay client adds, against an instant server")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 512])
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--think-time", type=float, default=1.0,
                   help="mean seconds between a session's requests (0 saturates the client: queueing, not overhead)")
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_replay)
    p = sub.add_parser("bench-stages", help="CompressionBench's stages run directly on one device, timed, and "
                                           "compared with another run of them")
    p.add_argument("--config", default="config/config.yaml",
                   help="the pipeline's YAML, or the config.json a previous run wrote")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--device", required=True, help="cpu or cuda (likelihood, verification and answers)")
    p.add_argument("--origin", default=None, help='JSON replacing every source\'s origin, e.g. '
                                                  '{"type": "local", "path": "model.gguf"}')
    p.add_argument("--contexts-from", default=None,
                   help="sample and score these contexts.parquet (another run's: the embedded corpus is the "
                        "Python build's own standard library) instead of the ones built here")
    p.add_argument("--compare", default=None, help="another run's --out-dir")
    p.add_argument("--likelihood-only", action="store_true",
                   help="stop after the reference likelihood (no answers reference, no verification)")
    p.add_argument("--threads", type=int, default=2)
    p.set_defaults(func=_bench_stages)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except InfbenchError as exc:
        print(f"infbench: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
