"""``infbench``: the pipeline's stages from a shell, without Snakemake."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infbench.errors import ConfigError, InfbenchError, InputFileError
from infbench.layout import LAYOUT


def _bench(args) -> None:
    from infbench.perf import likelihood as bench

    print(
        bench.run(
            args.model,
            contexts=args.contexts,
            context_tokens=args.context_tokens,
            continuation_tokens=args.continuation_tokens,
            batch_sizes=args.batch_sizes,
            sample_contexts=args.sample_contexts or args.contexts,
            sample_batch_size=args.sample_batch_size,
            dtype=args.dtype,
            repeats=args.repeats,
            device=args.device,
            threads=args.threads,
            eager=args.eager,
            profile_cached=args.profile_cached,
            out_md=args.out,
        )
    )


def _bench_replay(args) -> None:
    from infbench.perf import replay as bench

    print(
        bench.run(
            tuple(args.concurrency),
            window_s=args.window,
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
            think_time_s=args.think_time,
            out_md=args.out,
        )
    )


def _bench_transport(args) -> None:
    from infbench.perf import logits_transport as bench

    shapes = [(int(r), int(v)) for r, v in (shape.split("x") for shape in args.shape)]
    print(bench.run(device=args.device, shapes=shapes, dtype=args.dtype, requests=args.requests, out=args.out))


def _bench_vllm_agreement(args) -> None:
    from infbench.perf import vllm_agreement as bench

    print(
        bench.run(
            args.model,
            dtypes=args.dtype,
            contexts=args.contexts,
            rows=args.rows,
            length=args.length,
            n_last=args.n_last,
            kv_cache_mib=args.kv_cache_mib,
            out=args.out,
        )
    )


def _bench_vllm_likelihood(args) -> None:
    from infbench import atomic
    from infbench.perf import vllm_agreement as bench

    table = bench.likelihood(
        args.model,
        args.contexts,
        set_name="search",
        n_tokens=args.tokens,
        dtype=args.dtype,
        batch_size=args.batch_size,
        kv_cache_mib=args.kv_cache_mib,
    ).table()
    print(table)
    if args.out:
        atomic.write_text(args.out, table + "\n")


def _bench_far_context(args) -> None:
    from infbench.config import files
    from infbench.errors import ConfigError
    from infbench.perf import far_context as bench

    serving = files.load(args.config).serving
    if serving is None:
        raise ConfigError(f"{args.config}: serving", "the config has no serving section")
    print(bench.run(serving, args.sessions, args.model, args.gguf, args.carriers, tuple(args.keep), args.out))


def _bench_stages(args) -> None:
    from infbench.perf import stages as bench

    print(
        bench.run(
            args.config,
            args.out_dir,
            device=args.device,
            origin=json.loads(args.origin) if args.origin else None,
            compare=args.compare,
            likelihood_only=args.likelihood_only,
            cores=args.cores,
        )
    )


def _bench_noop_rerun(args) -> None:
    from infbench.perf import noop_rerun

    print(noop_rerun.run(args.workflow, args.config, args.workdir, repeats=args.repeats, out_md=args.out))


def _stage_times(args) -> None:
    from infbench import stage_times

    print(stage_times.report(args.benchmarks, out_md=args.out))


def _replay(args) -> None:
    from pydantic import ValidationError

    from infbench.serving import trace_replay
    from infbench.serving.value import Targets

    if (args.tau_first is None) != (args.tau_token is None):
        raise ConfigError("--tau-first/--tau-token", "give both latency targets, or neither")
    targets = (
        trace_replay.targets_file(args.targets)
        if args.targets
        else Targets(tau_first_s=args.tau_first, tau_token_s=args.tau_token)
        if args.tau_first is not None
        else None
    )
    if not Path(args.trace).exists():  # the trace before the server: a missing trace is no --model error
        raise InputFileError(args.trace, "no such trace file or directory (--trace)")
    model = args.model or trace_replay.served_model(args.url)
    try:
        settings, deployment = _replay_settings(args, model)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(".".join(map(str, err["loc"])), err["msg"]) from None
    summary = trace_replay.run(
        args.trace,
        args.format,
        settings,
        deployment,
        targets,
        args.order,
        args.out,
        block_size=args.block_size,
        context_limit=args.context_limit,
        max_context_overflow_share=args.max_context_overflow_share,
        progress=not args.no_progress and sys.stderr.isatty(),
    )
    print(trace_replay.report(summary, args.out))


def _replay_settings(args, model: str):
    from infbench.config.model import Deployment
    from infbench.serving.replay_settings import ReplaySettings

    settings = ReplaySettings(
        base_url=args.url,
        model=model,
        concurrency=args.concurrency,
        seed=args.seed,
        warmup_s=args.warmup,
        window_s=args.window,
        request_timeout_s=args.request_timeout,
        idle_cap_s=args.idle_cap,
        token_low=args.token_range[0],
        token_high=args.token_range[1],
        marker_tokens=args.marker_tokens,
        temperature=args.temperature,
        start_ratio=tuple(args.start_ratio),
        request_fields=dict(args.request_field),
        api=args.api,
        tokenizer=args.tokenizer,
        far_context=_far_context(args.far_context_share),
    )
    deployment = Deployment(
        name=model,
        devices=args.devices,
        accelerator=args.accelerator,
        usd_per_device_hour=args.usd_per_device_hour,
        input_usd_per_mtok=args.input_usd_per_mtok,
        output_usd_per_mtok=args.output_usd_per_mtok,
        context_limit=args.context_limit or sys.maxsize,
    )
    return settings, deployment


def _far_context(share: float) -> dict[str, float]:
    from infbench.config.files import serving_default

    return {
        "share": share,
        **{k: serving_default(f"workload.far_context.{k}") for k in ("span_tokens", "min_distance")},
    }


def _idle_cap(value: str) -> float | None:
    if value.lower() in ("none", "off"):
        return None
    cap = float(value)
    if not cap > 0:
        raise argparse.ArgumentTypeError("a number of seconds > 0, or none")
    return cap


def _json_field(value: str) -> tuple[str, object]:
    key, sep, raw = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("KEY=JSON, e.g. logit_bias='{\"2\": -100}'")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _add_replay(sub) -> None:
    from infbench.config.files import serving_default as d

    p = sub.add_parser(
        "replay",
        help="replay a trace (Weka/AgentX, Mooncake) against any OpenAI-compatible endpoint",
        description="Closed-loop replay of a trace against a running server, scored as the pipeline "
        "scores (D, G, f). Defaults are the paper's (the config schema's).",
    )
    p.add_argument("--trace", required=True, help="a trace file, or a directory of Weka session files")
    p.add_argument(
        "--format",
        choices=["auto", "weka", "mooncake"],
        default="auto",
        help="auto: Weka if the first record has 'requests', Mooncake if it has 'input_length'",
    )
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--model", default=None, help="model name sent (default: the first of GET /v1/models)")
    p.add_argument(
        "--api",
        choices=["completions", "chat"],
        default="completions",
        help="completions: token-id prompts (exact lengths); chat: text prompts (needs --tokenizer)",
    )
    p.add_argument("--tokenizer", default=None, help="chat: the model's tokenizer.json, or a directory holding it")
    p.add_argument("--out", required=True, help="directory for records.parquet and summary.json")
    g = p.add_argument_group("replay")
    g.add_argument("--concurrency", type=int, default=1, help="lanes: top-level sessions at once (default 1)")
    g.add_argument(
        "--order",
        choices=["draw", "trace"],
        default="draw",
        help="draw: a seeded endless draw (the pipeline's); trace: trace order, each session once",
    )
    g.add_argument("--seed", type=int, default=0, help="the draw's and the lanes' start points' seed (default 0)")
    g.add_argument("--warmup", type=float, default=d("replay.warmup_s"), help="seconds (default %(default)s)")
    g.add_argument("--window", type=float, default=d("replay.window_s"), help="seconds scored (default %(default)s)")
    g.add_argument(
        "--start-ratio",
        type=float,
        nargs=2,
        default=d("replay.start_ratio"),
        metavar=("LO", "HI"),
        help="a lane's first session starts at a fraction of its main chain drawn from [LO, HI] "
        "(default %(default)s; 0 0: at turn one)",
    )
    g.add_argument(
        "--idle-cap",
        type=_idle_cap,
        default=d("replay.idle_cap_s"),
        help="cap idle gaps at this many seconds, or none (default %(default)s)",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        default=d("replay.request_timeout_s"),
        help="a request's whole life, seconds (default %(default)s)",
    )
    g.add_argument("--temperature", type=float, default=d("replay.temperature"), help="(default %(default)s)")
    g.add_argument(
        "--context-limit",
        type=int,
        default=None,
        help="drop sessions with a request (prompt + output) longer than this, whole (default: keep all)",
    )
    g.add_argument(
        "--block-size",
        type=int,
        default=d("workload.trace.mooncake_block_size"),
        help="Mooncake hash-id block size in tokens (default %(default)s; Weka traces carry theirs)",
    )
    g.add_argument(
        "--token-range",
        type=int,
        nargs=2,
        default=d("workload.token_id_range"),
        metavar=("LOW", "HIGH"),
        help="prompt filler token ids, [LOW, HIGH), no special tokens (default %(default)s)",
    )
    g.add_argument(
        "--marker-tokens",
        type=int,
        default=d("workload.marker_tokens"),
        help="per-session-instance cache-bust marker at the start of each prompt (default %(default)s)",
    )
    g.add_argument(
        "--far-context-share",
        type=float,
        default=d("workload.far_context.share"),
        help="share of long-enough requests ending with a repeat of earlier ids that the model "
        "copies (serving.workload.far_context; 0: none; default %(default)s)",
    )
    g.add_argument(
        "--request-field",
        type=_json_field,
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="an extra JSON field of every request (repeatable)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("deployment and score")
    g.add_argument("--devices", type=int, default=d("deployment.devices"), help="GPUs d (default %(default)s)")
    g.add_argument("--accelerator", choices=["gpu", "cpu"], default=d("deployment.accelerator"))
    g.add_argument(
        "--usd-per-device-hour", type=float, default=d("deployment.usd_per_device_hour"), help="r (default %(default)s)"
    )
    g.add_argument(
        "--input-usd-per-mtok", type=float, default=d("deployment.input_usd_per_mtok"), help="(default %(default)s)"
    )
    g.add_argument(
        "--output-usd-per-mtok", type=float, default=d("deployment.output_usd_per_mtok"), help="(default %(default)s)"
    )
    g.add_argument("--tau-first", type=float, default=None, help="TTFT target, seconds (D needs targets)")
    g.add_argument("--tau-token", type=float, default=None, help="TPOT target, seconds")
    g.add_argument("--targets", default=None, help=f"or the pipeline's {LAYOUT.targets()}")
    g.add_argument(
        "--max-context-overflow-share",
        type=float,
        default=d("replay.max_context_overflow_share"),
        help="more overflows among the window's requests make the run invalid (default %(default)s)",
    )
    p.set_defaults(func=_replay)


def _source(args) -> None:
    from pydantic import ValidationError

    from infbench import sources
    from infbench.config.model import SourceOrigin, dotted_key

    try:
        raw = json.loads(args.origin)
        origin = SourceOrigin.model_validate(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError("--origin", f"not JSON ({exc.msg} at character {exc.pos}): {args.origin}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"--origin {dotted_key(raw, err['loc'], err['type'])}", err["msg"]) from None
    record = sources.materialize(args.name, origin, args.out_dir, args.record, dtype=args.dtype)
    print(f"{record.name}: {record.n_params:,} parameters -> {args.out_dir}")


def _reward(args) -> None:
    from pathlib import Path

    from infbench.compression import tasks, verification
    from infbench.compression.baselines.package import from_template
    from infbench.config import files
    from infbench.errors import ConfigError, InputFileError
    from infbench.layout import Layout

    config = files.load(args.config)
    known = tasks.tasks(config.tasks)
    if args.task not in known:
        raise ConfigError("--task", f"unknown task '{args.task}' (tasks in {args.config}: {', '.join(known)})")
    results = Layout(args.results)
    if not Path(args.submission).is_dir():
        raise InputFileError(args.submission, "not a submission directory (it does not exist)")
    source = known[args.task].source
    package = from_template(args.submission, results, source)
    needed = [results.source_record(source), *verification.search_set(results, source).model_dump().values()]
    missing = [f for f in needed if not Path(f).is_file()]
    if missing:
        raise InputFileError(
            missing[0], f"{source}'s search set is not built: run `snakemake --cores all {' '.join(missing)}` first"
        )
    record = verification.reward(
        str(package),
        known[args.task],
        results=results,
        settings=config.verification,
        sandbox=config.sandbox,
        threads=args.threads,
        log_path=Path(args.log or results.reward_log()),
    )
    summary = {
        k: getattr(record, k)
        for k in (
            "task",
            "submission",
            "reward",
            "f",
            "ppl",
            "s_pkg_bytes",
            "s_res_bytes",
            "failed_check",
            "failure",
            "wall_s",
        )
    }
    summary["tps"] = record.decode.tps if record.decode else None
    print(json.dumps(summary, indent=2))


def _check_run(args) -> None:
    from collections import Counter

    from infbench.compression import tasks
    from infbench.config import files
    from infbench.runs import ingest

    config = files.load(args.config)
    record = ingest.load(args.run_dir, known_models=set(config.runs.prices), tasks=set(tasks.tasks(config.tasks)))
    print(
        json.dumps(
            {
                "run": record.run,
                "agent": record.spec.agent.model_dump(),
                "task": record.spec.task,
                "events": dict(Counter(e.type for e in record.events)),
            },
            indent=2,
        )
    )


def _check_config(args) -> None:
    from infbench import preflight
    from infbench.config import files

    for path in args.configs:
        cfg = files.load(path)
        try:
            preflight.check(cfg)
        except ConfigError as exc:
            raise exc.read_from(path) from None
        for missing in preflight.outside(cfg):
            print(f"infbench: note: {missing.read_from(path)}", file=sys.stderr)
        print(f"{path}: ok")


def _check_submission(args) -> None:
    from infbench import preflight
    from infbench.config import files

    cfg = files.load(args.config)
    manifest = preflight.compression_submission(args.directory, cfg)
    preflight.tokenizer_loads(args.directory, manifest)
    print(f"{args.directory}: ok (source {manifest.source}, runtime {manifest.runtime})")


def _check_server(args) -> None:
    from infbench import preflight
    from infbench.config import files

    preflight.server_requirements(args.directory, files.load(args.config))
    print(f"{args.directory}: ok")


def _summary(args) -> None:
    from infbench import summary

    if not Path(args.results).is_dir():
        raise InfbenchError(f"{args.results}: no such results directory (--results)")
    print("\n".join(summary.lines(args.results)) or f"{args.results}: no tables yet under {args.results}/tables/")


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

    p = sub.add_parser(
        "bench-likelihood",
        help="scorer vs bare forward throughput, and sampling throughput, "
        "against the device's measured matmul rate and copy bandwidth",
    )
    p.add_argument(
        "model",
        help="a checkpoint directory, or random:NAME (random weights: "
        "random:llama-1b, random:llama-8b, random:smollm2-135m)",
    )
    p.add_argument("--contexts", type=int, default=16, help="contexts scored")
    p.add_argument("--context-tokens", type=int, default=128)
    p.add_argument("--continuation-tokens", type=int, default=256)
    p.add_argument("--batch-sizes", type=int, nargs="*", default=[8], help="scorer batch sizes (none: no scorer rows)")
    p.add_argument("--sample-contexts", type=int, default=None, help="contexts sampled (default: --contexts)")
    p.add_argument(
        "--sample-batch-size",
        type=int,
        default=None,
        help="default: chosen by memory on CUDA, the largest --batch-sizes on the CPU",
    )
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-eager", dest="eager", action="store_false", help="on CUDA, sample with CUDA graphs only")
    p.add_argument(
        "--profile-cached", type=int, default=None, help="also profile one decode step at this cache length (CUDA)"
    )
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench)

    p = sub.add_parser(
        "reward",
        help="search-time reward of a submission (10 F_s, or 0), appended to a JSONL log; "
        "a template such as examples/starter_submission is first packed with the "
        "task's source checkpoint",
    )
    p.add_argument("submission")
    p.add_argument("--task", required=True, help="e.g. smollm2-135m-0.1gib (source-<limit>gib)")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default="results", help="the pipeline's results directory")
    p.add_argument("--log", default=None, help="the JSONL log appended to (default: RESULTS/reward_log.jsonl)")
    p.add_argument("--threads", type=int, default=2)
    p.set_defaults(func=_reward)
    p = sub.add_parser("check-run", help="validate a run directory (docs/runs.md) as the pipeline ingests it")
    p.add_argument("run_dir")
    p.add_argument("--config", default="config/config.yaml")
    p.set_defaults(func=_check_run)
    p = sub.add_parser(
        "check-config", help="check config files as the workflow does at start (YAML errors with their line)"
    )
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.set_defaults(func=_check_config)
    p = sub.add_parser(
        "check-submission",
        help="check a compression package as the pipeline does before running it "
        "(manifest, files, source, tokenizer loads)",
    )
    p.add_argument("directory")
    p.add_argument("--config", default="config/config.yaml")
    p.set_defaults(func=_check_submission)
    p = sub.add_parser(
        "check-server",
        help="check a server submission as the pipeline does before starting it (spec, command, requires)",
    )
    p.add_argument("directory")
    p.add_argument("--config", default="config/config.yaml")
    p.set_defaults(func=_check_server)
    p = sub.add_parser("summary", help="the verdicts and scores of a run's tables (printed at the end of a run)")
    p.add_argument("--results", default="results", help="the run's results/ directory")
    p.set_defaults(func=_summary)
    p = sub.add_parser("replay-log", help="append a replay's score to a run's replay_log.jsonl (docs/runs.md)")
    p.add_argument("summary", help=f"a replay summary JSON (e.g. {LAYOUT.replay('<system>', '<seed>', 'json')})")
    p.add_argument("--server", required=True, help="the server's code and configuration directory (hashed)")
    p.add_argument("--log", required=True, help="e.g. runs/<name>/replay_log.jsonl")
    p.add_argument("--wall-s", type=float, required=True, help="seconds the replay took")
    p.set_defaults(func=_replay_log)
    p = sub.add_parser("bench-replay", help="latency and CPU the replay client adds, against an instant server")
    p.add_argument("--concurrency", type=int, nargs="+", default=[4, 64, 512])
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument(
        "--think-time",
        type=float,
        default=1.0,
        help="mean seconds between a session's requests (0 saturates the client: queueing, not overhead)",
    )
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_replay)
    p = sub.add_parser(
        "bench-transport", help="logits from a worker process to the pipeline: the shared buffer beside the former pipe"
    )
    p.add_argument("--device", default="cpu", help="where the logits are made: cpu or cuda")
    p.add_argument("--shape", nargs="+", default=["8x49152", "1x49152"], help="ROWSxVOCAB of one answer")
    p.add_argument("--dtype", default="bfloat16", help="the model's logits dtype (float32, float16, bfloat16)")
    p.add_argument("--requests", type=int, default=20, help="timed requests per transport and shape")
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_transport)
    p = sub.add_parser(
        "bench-vllm-agreement", help="vLLM against transformers: teacher-forced log-probs of the same rows, per dtype"
    )
    p.add_argument("--model", default=LAYOUT.checkpoint("smollm2-135m"), help="the checkpoint (the embedded source)")
    p.add_argument("--contexts", default=None, help="a contexts.parquet to take rows from (else random tokens)")
    p.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--length", type=int, default=128, help="tokens of each row")
    p.add_argument("--n-last", type=int, default=64, help="positions scored at each row's end")
    p.add_argument(
        "--kv-cache-mib", type=int, default=512, help="vLLM's KV cache (one row of the model's length in float32)"
    )
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_vllm_agreement)
    p = sub.add_parser(
        "bench-vllm-likelihood",
        help="likelihood.backend vllm against transformers: the likelihood stage on one set with each backend",
    )
    p.add_argument("--model", default=LAYOUT.checkpoint("smollm2-135m"), help="the checkpoint (the embedded source)")
    p.add_argument("--contexts", default=LAYOUT.contexts("smollm2-135m", "search"), help="a search set's contexts")
    p.add_argument("--tokens", type=int, default=256, help="continuation tokens (the embedded default's)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--kv-cache-mib", type=int, default=256, help="vLLM's KV cache (one 8,192-token row in BF16)")
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_vllm_likelihood)
    p = sub.add_parser(
        "bench-far-context",
        help="how the reference, servers that keep only a prompt's end and llama.cpp continue "
        "the far-context carriers of the replays",
    )
    p.add_argument("--config", default="config/config.yaml", help="the pipeline's YAML (its serving section)")
    p.add_argument("--sessions", default=LAYOUT.sessions())
    p.add_argument("--model", default=LAYOUT.checkpoint("smollm2-135m"), help="the reference checkpoint")
    p.add_argument("--gguf", default=None, help="its GGUF twin, to score llama.cpp too")
    p.add_argument("--carriers", type=int, default=24, help="carriers of a development draw measured")
    p.add_argument("--keep", type=int, nargs="*", default=[64, 256], help="prompt ends kept by the truncating servers")
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_far_context)
    p = sub.add_parser(
        "bench-stages",
        help="CompressionBench's stages (the pipeline's rules) on one device, timed, "
        "and compared with another run of them",
    )
    p.add_argument("--config", default="config/config.yaml", help="the pipeline's config")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--device", required=True, help="cpu or cuda (likelihood, verification and answers)")
    p.add_argument(
        "--origin",
        default=None,
        help='JSON replacing every source\'s origin, e.g. {"type": "local", "path": "model.gguf"}',
    )
    p.add_argument("--compare", default=None, help="another run's --out-dir")
    p.add_argument(
        "--likelihood-only",
        action="store_true",
        help="stop after the reference likelihood (no answers reference, no verification)",
    )
    p.add_argument("--cores", type=int, default=2, help="Snakemake's --cores")
    p.set_defaults(func=_bench_stages)
    p = sub.add_parser(
        "bench-noop-rerun",
        help="seconds `snakemake -n` takes on a working directory that is up to "
        "date (made without running the jobs' work)",
    )
    p.add_argument("--workflow", default=".", help="the repository (its Snakefile and src/)")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--workdir", required=True, help="an empty directory to make up to date")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.set_defaults(func=_bench_noop_rerun)
    p = sub.add_parser(
        "stage-times",
        help="seconds and peak memory per stage and per rule, from the benchmark: files of a pipeline run",
    )
    p.add_argument("--benchmarks", default="benchmarks", help="the run's benchmarks/ directory")
    p.add_argument("--out", default=None, help="also write the tables (Markdown) here")
    p.set_defaults(func=_stage_times)
    _add_replay(sub)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except InfbenchError as exc:
        print(f"infbench: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
