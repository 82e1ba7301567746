"""How the accuracy gate's verdicts depend on the operator secret, measured (docs/compression.md).

``answer``: the questions that any of the given secrets would draw at any of the given sizes, answered once,
greedy, as the pipeline does it (:func:`infbench.compression.accuracy.greedy_generate_fn`, batches of
``answers.batch_size``): the BF16 source through the ``hf`` runtime (``--reference``, as ``A(p)``), or a package
through its runtime in this process (``--package``; the pipeline's own runtimes only: nothing is sandboxed),
stopped at EOS or a stop sequence and judged by the driver. Writes each item's outcome and the seconds per
question of each benchmark.

``verdicts``: for each secret and size, the questions the gate draws and each candidate's verdict
``A(a) >= rho * A(p)`` from those outcomes.

``consistency``: ``gate_consistency`` of each package under the demo and each secret: the source's ``A(p)`` file
for that secret computed as the pipeline's ``answers_reference`` does (kept in ``--out``), each package
teacher-forced on the source's answers in one pass (the pipeline's own runtimes; an item several secrets draw
once), its excess against the band around the ``E_v`` of its measured record (the demo secret's verification
set).

    .venv/bin/python scripts/gate_stability.py answer --reference results/sources/smollm2-135m/hf \
        --out o/ref.json
    .venv/bin/python scripts/gate_stability.py answer --package results/candidates/smollm2-135m/gguf-Q4_0 \\
        --source results/sources/smollm2-135m/hf --out o/gguf-Q4_0.json
    .venv/bin/python scripts/gate_stability.py verdicts o/ref.json o/gguf-Q4_0.json
    .venv/bin/python scripts/gate_stability.py consistency --source results/sources/smollm2-135m/hf \
        --measured results/compression/smollm2-135m/measured --out o/consistency \
        results/candidates/smollm2-135m/gguf-Q4_0 results/runs/reference-search/final
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from infbench import operator_secret
from infbench.compression import held_out
from infbench.compression.accuracy import greedy_generate_fn
from infbench.config import files
from infbench.config.model import BENCHMARKS, AnswerSettings, SandboxSettings
from infbench.evaluation import driver
from infbench.evaluation.generation import GenerateFn, checkpoint_generation_config, eos_ids
from infbench.evaluation.questions import Question, QuestionSet, load_questions, question_pool, select

REPO = Path(__file__).resolve().parents[1]
SECRETS = [f"gate-stability-{i}" for i in range(1, 6)]  # five operator secrets, beside the public demo
SIZES = (26,)  # the embedded default's count (10 per benchmark flipped gguf-Q4_0 under one secret)


def settings() -> AnswerSettings:
    return files.load(REPO / "config/config.yaml").answers


def secret(value: str | None) -> operator_secret.OperatorSecret:
    """The secret as a job would load it (``None``: the public demo)."""
    variable = "INFBENCH_GATE_STABILITY_SECRET"
    os.environ.pop(variable, None)
    if value:
        os.environ[variable] = value
    return operator_secret.load({"env": variable, "file": None, "require": False})


def draws(s: AnswerSettings, value: str | None, n: int) -> dict[str, tuple[Question, ...]]:
    """The questions the gate asks, per benchmark, under secret ``value`` with ``n`` questions each (at most the
    pool; GSM8K-style problems are instantiated by the secret's question seed, so they differ by secret)."""
    seed = held_out.question_seed(secret(value), s.seed)
    out = {}
    for b in BENCHMARKS:
        pool, _, _ = question_pool(s, b, seed)
        out[b] = select(pool, min(n, len(pool)), seed, b)
    return out


def needed(s: AnswerSettings) -> dict[str, dict[str, Question]]:
    """Every question any secret draws at any size, once, by benchmark and id."""
    out: dict[str, dict[str, Question]] = {b: {} for b in BENCHMARKS}
    for value in [None, *SECRETS]:
        for n in SIZES:
            for b, questions in draws(s, value, n).items():
                out[b] |= {q.id: q for q in questions}
    return out


def generate_fn(args) -> GenerateFn:
    from transformers import AutoTokenizer

    from infbench.compression.package_api import TRUSTED
    from infbench.compression.runtimes import load_runner
    from infbench.compression.runtimes.hf import HFRunner
    from infbench.compression.submission import load_manifest

    source = args.reference or args.source
    if args.reference:
        runner = HFRunner(Path(args.reference), "cpu", dtype=settings().dtype)
    else:
        package = Path(args.package)
        manifest = load_manifest(package)
        if manifest.runtime not in TRUSTED:
            raise SystemExit(f"{package}: runtime '{manifest.runtime}' runs unsandboxed here; only {TRUSTED}")
        runner = load_runner(package, manifest, "cpu", args.threads)
    tokenizer = AutoTokenizer.from_pretrained(source)
    return greedy_generate_fn(runner, tokenizer, eos_ids(tokenizer, checkpoint_generation_config(source)))


def answer(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    s = settings()
    want = needed(s)
    fn = generate_fn(args)
    shown = load_questions(s, seed=0)  # the few-shot exemplars: the same under every secret
    items, seconds = {}, {}
    for b in BENCHMARKS:
        qset = QuestionSet(
            benchmark=b,
            origin=shown[b].origin,
            pool_size=shown[b].pool_size,
            fewshot=shown[b].fewshot,
            questions=tuple(want[b].values()),
        )
        start = time.perf_counter()
        _, records = driver.evaluate_benchmark(fn, qset, s, label=args.out, sandbox=SandboxSettings())
        seconds[b] = (time.perf_counter() - start) / len(records)
        items |= {f"{b}/{r.id}": r.correct for r in records}
        print(
            b, len(records), "items", f"{seconds[b]:.2f} s each", sum(r.correct for r in records), "correct", flush=True
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"items": items, "seconds_per_question": seconds}, indent=1))


def verdicts(args) -> None:
    s = settings()
    reference, *candidates = [(Path(p).stem, json.loads(Path(p).read_text())["items"]) for p in args.items]
    for n in SIZES:
        print(f"\n{n} questions per benchmark (at most the pool)")
        for value in [None, *SECRETS]:
            ids = draws(s, value, n)

            def accuracy(items: dict[str, bool], ids=ids) -> float:
                return sum(sum(items[f"{b}/{q.id}"] for q in ids[b]) / len(ids[b]) for b in BENCHMARKS) / 3

            a_ref = accuracy(reference[1])
            cells = [
                f"{name} {accuracy(items):.3f} {'pass' if accuracy(items) >= s.rho * a_ref - 1e-12 else 'FAIL'}"
                for name, items in candidates
            ]
            print(
                f"  {value or 'public demo':18} A(p) {a_ref:.3f} threshold {s.rho * a_ref:.3f} | " + " | ".join(cells)
            )


def consistency(args) -> None:
    import numpy as np
    import torch

    from infbench.compression import accuracy, integrity
    from infbench.compression.harness.likelihood import answers_teacher_forced
    from infbench.compression.runtimes import load_runner
    from infbench.compression.submission import load_manifest

    torch.set_num_threads(args.threads)
    s, integrity_settings = settings(), files.load(REPO / "config/config.yaml").verification.integrity
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for value in [None, *SECRETS]:
        name = value or "demo"
        seed = held_out.question_seed(secret(value), s.seed)
        reference = out / f"reference-{name}.json"
        if not reference.exists():
            start = time.perf_counter()
            accuracy.compute_reference(
                "source",
                args.source,
                s,
                reference,
                out / f"reference-{name}.parquet",
                question_seed=seed,
                sandbox=SandboxSettings(),
                threads=args.threads,
            )
            print(f"A(p) under {name}: {time.perf_counter() - start:.0f} s", flush=True)
        jobs[name] = accuracy.GateJob(
            answers=s, reference_json=str(reference), source_checkpoint=args.source, label=name, question_seed=seed
        )
    answers = {name: accuracy.source_answers(job) for name, job in jobs.items()}
    rows = []
    for package in map(Path, args.packages):
        manifest = load_manifest(package)
        name = package.name if package.name != "final" else f"run-{package.parent.name}"  # an agent run's final
        record = Path(args.measured) / f"{name}.json"
        checks = {c["name"]: c for c in json.loads(record.read_text())["checks"]}
        e_v = checks["gate_consistency"]["evidence"]["verification_excess_nats_per_token"]
        runner = load_runner(package, manifest, "cpu", args.threads)
        # an item the secrets share (the TriviaQA-style pool, HumanEval draws) is teacher-forced once; a
        # GSM8K-style item of the same id is another problem under another secret, so items are keyed by content
        unique = {
            (i, tuple(p), tuple(a)): (p, a)
            for ids, prompts, tokens, _ in answers.values()
            for i, p, a in zip(ids, prompts, tokens)
        }
        start = time.perf_counter()
        forced = dict(
            zip(
                unique,
                answers_teacher_forced(
                    runner,
                    [p for p, _ in unique.values()],
                    [a for _, a in unique.values()],
                    batch_size=s.batch_size,
                    one_pass=True,
                ),
            )
        )
        print(f"{record.stem}: {len(unique)} items teacher-forced in {time.perf_counter() - start:.0f} s", flush=True)
        for name, (ids, prompts, tokens, source_lp) in answers.items():
            check = integrity.gate_consistency(
                [np.asarray(lp, dtype=np.float64) for lp in source_lp],
                [forced[(i, tuple(p), tuple(a))] for i, p, a in zip(ids, prompts, tokens)],
                ids,
                verification_excess=e_v,
                ratio=integrity_settings.gate_excess_ratio,
                margin=integrity_settings.gate_excess_margin,
            )
            e = check.evidence
            rows.append((record.stem, name, e["gate_excess_nats_per_token"], e_v, e["band"], e["items"], check.passed))
            print(
                f"{record.stem:24} {name:18} E_gate {e['gate_excess_nats_per_token']:.3f} E_v {e_v:.3f} "
                f"ratio {e['gate_excess_nats_per_token'] / e_v:.2f} band [{e['band'][0]:.2f}, {e['band'][1]:.2f}] "
                f"items {e['items']} {'pass' if check.passed else 'FAIL'}",
                flush=True,
            )
        (out / "consistency.json").write_text(json.dumps(rows, indent=1))
        del runner


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("answer")
    who = a.add_mutually_exclusive_group(required=True)
    who.add_argument("--reference", help="the BF16 source checkpoint (A(p))")
    who.add_argument("--package", help="a baseline package directory")
    a.add_argument("--source", help="the source checkpoint (its tokenizer), with --package")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--out", required=True)
    v = sub.add_parser("verdicts")
    v.add_argument("items", nargs="+", help="answer outputs, the reference's first")
    c = sub.add_parser("consistency")
    c.add_argument("--source", required=True, help="the BF16 source checkpoint")
    c.add_argument("--measured", required=True, help="the source's measured/ directory (each package's E_v)")
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--out", required=True)
    c.add_argument("packages", nargs="+", help="package directories (the pipeline's own runtimes)")
    args = p.parse_args()
    {"answer": answer, "verdicts": verdicts, "consistency": consistency}[args.command](args)


if __name__ == "__main__":
    main()
