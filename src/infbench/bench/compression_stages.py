"""CompressionBench's stages run directly (no Snakemake) on one device, each timed, and compared with another
run of the same stages: the CPU run against a CUDA run of the embedded default, say.

The stages call the same functions as the pipeline's rules, in its order: source, contexts, sampling and
reference scoring of both sets, the answers reference ``A(p)``, and the verification measurement (likelihood,
integrity, accuracy gate, decode timing, storage) of the BF16 package (``hf`` runtime) and the starter package
(``python`` runtime). With ``compare``, this run's scorer also scores the other run's continuations, so the
reference PPL of identical tokens shows the kernels' difference alone.

``config`` is the pipeline's YAML (validated through the schema) or the ``config.json`` a previous run of this
module wrote (already validated: the schema check needs Snakemake, which a GPU machine may not have).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from infbench import atomic

SETS = ("search", "verification")
CANDIDATES = ("bf16", "starter")
STARTER_CODE = Path(__file__).resolve().parents[3] / "examples" / "starter_submission"


def _config(path: str, device: str, origin: dict | None) -> dict:
    if path.endswith(".json"):
        config = json.loads(Path(path).read_text())
    else:
        from infbench.config_io import load_config

        config = load_config(path)
    for section in ("likelihood", "verification", "answers"):
        config[section]["device"] = device
    if origin is not None:
        for source in config["sources"].values():
            source["origin"] = origin
    return config


def run(config_path: str, out_dir: str, *, device: str, origin: dict | None = None,
        contexts_from: str | None = None, compare: str | None = None, likelihood_only: bool = False,
        threads: int = 2) -> str:
    from infbench import sources
    from infbench.compression import contexts, likelihood

    out = Path(out_dir)
    config = _config(config_path, device, origin)
    atomic.write_json(out / "config.json", config)
    name = next(iter(config["sources"]))
    src, lk = out / "sources" / name, out / "likelihood" / name
    seconds: dict[str, float] = {}

    def stage(label: str, fn) -> None:
        start = time.monotonic()
        fn()
        seconds[label] = round(time.monotonic() - start, 1)
        print(f"{label}: {seconds[label]} s", flush=True)

    checkpoint, record = str(src / "hf"), str(src / "source.json")
    stage("source", lambda: sources.materialize(name, config["sources"][name]["origin"], checkpoint, record,
                                                dtype=config["sources"][name].get("dtype", "bfloat16")))
    lc = config["likelihood"]
    ctx_parquet = contexts_from or str(lk / "contexts.parquet")
    if contexts_from is None:
        stage("contexts", lambda: contexts.build(
            name, checkpoint, record, ctx_parquet, str(lk / "contexts.json"), corpus=lc["corpus"],
            contexts_per_set=lc["contexts_per_set"], context_tokens=lc["context_tokens"],
            continuation_tokens=lc["continuation_tokens"], seed=lc["context_seed"]))
    common = dict(backend=lc["backend"], dtype=lc["dtype"], device=device, tensor_parallel=lc["tensor_parallel"],
                  threads=threads)
    for set_name in SETS:
        d = lk / set_name
        stage(f"sampling {set_name}", lambda: likelihood.sample_set(
            name, checkpoint, ctx_parquet, set_name, str(d / "continuations.parquet"), str(d / "sampling.json"),
            n_tokens=lc["continuation_tokens"], temperature=lc["temperature"], seed=lc["seed"],
            batch_size=lc["sample_batch_size"], cuda_graphs=lc["cuda_graphs"], **common))
        stage(f"scoring {set_name}", lambda: likelihood.score_reference(
            name, checkpoint, str(d / "continuations.parquet"), str(d / "reference_scores.parquet"),
            str(d / "reference.json"), batch_size=lc["score_batch_size"],
            bootstrap_resamples=lc["bootstrap_resamples"], seed=lc["seed"], **common))
        if compare:
            other = Path(compare) / "likelihood" / name / set_name / "continuations.parquet"
            cross = out / "cross" / set_name
            stage(f"scoring {set_name}, the other run's continuations", lambda: likelihood.score_reference(
                name, checkpoint, str(other), str(cross / "reference_scores.parquet"), str(cross / "reference.json"),
                batch_size=lc["score_batch_size"], bootstrap_resamples=lc["bootstrap_resamples"], seed=lc["seed"],
                **common))
    if not likelihood_only:
        _answers_and_verification(config, out, name, checkpoint, record, lk / "verification", threads, stage)
    atomic.write_json(out / "stages.json", {"device": device, "seconds": seconds})
    text = pd.DataFrame([{"stage": k, "seconds": v} for k, v in seconds.items()]).to_markdown(index=False)
    if compare:
        text += "\n\n" + comparison(out, Path(compare), name)
    atomic.write_text(out / "summary.md", text + "\n")
    return text


def _answers_and_verification(config, out, name, checkpoint, record, verification_set, threads, stage) -> None:
    from infbench.compression import verification
    from infbench.compression.accuracy import make_gate
    from infbench.compression.answers import reference, settings
    from infbench.compression.baselines import package
    from infbench.config.model import SandboxSettings

    answers_ref = out / "answers" / name / "reference.json"
    stage("answers reference", lambda: reference.compute_reference(
        name, checkpoint, settings.from_config({"answers": config["answers"]}), str(answers_ref),
        str(answers_ref.with_name("reference_items.parquet")),
        sandbox=SandboxSettings.model_validate(config["sandbox"]), threads=threads))
    packages = {"bf16": out / "candidates" / name / "bf16", "starter": out / "candidates" / name / "starter"}
    stage("packages", lambda: (package.bf16(checkpoint, name, packages["bf16"]),
                               package.starter(STARTER_CODE, checkpoint, name, packages["starter"])))
    for candidate, pkg in packages.items():
        measured = out / "compression" / name / "measured" / f"{candidate}.json"
        measured.parent.mkdir(parents=True, exist_ok=True)  # the worker's log is written there from the start
        stage(f"verification {candidate}", lambda: verification.measure_for_pipeline(
            str(pkg), name, source_checkpoint=checkpoint, source_record=record,
            continuations=str(verification_set / "continuations.parquet"),
            reference_scores=str(verification_set / "reference_scores.parquet"), settings=config["verification"],
            sandbox=config["sandbox"], threads=threads, out=str(measured), worker_log=str(measured.with_suffix(".log")),
            accuracy_gate=make_gate(config["answers"], answers_ref, checkpoint, label=candidate)))


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def comparison(this: Path, other: Path, source: str) -> str:
    """This run (a) against the other (b): the reference likelihood per set, the candidates' measurements."""
    from infbench.compression.likelihood_files import read_continuations, stack

    rows = []
    for set_name in SETS:
        a, b = (_json(run / "likelihood" / source / set_name / "reference.json") for run in (this, other))
        cross = _json(this / "cross" / set_name / "reference.json")
        ta, tb = (stack(read_continuations(run / "likelihood" / source / set_name / "continuations.parquet")
                        ["continuation_ids"], np.int32) for run in (this, other))
        rows += [
            {"what": f"{set_name}: reference PPL", "a": a["ppl"], "b": b["ppl"]},
            {"what": f"{set_name}: reference PPL of b's continuations (a's scorer)", "a": cross["ppl"],
             "b": b["ppl"]},
            {"what": f"{set_name}: sampler PPL", "a": a["sampler_ppl"], "b": b["sampler_ppl"]},
            {"what": f"{set_name}: F_self", "a": a["f_self"], "b": b["f_self"]},
            {"what": f"{set_name}: continuations identical in a and b (share of contexts)",
             "a": float(np.mean(np.all(ta == tb, axis=1))), "b": None},
            {"what": f"{set_name}: tokens before the first difference (share)",
             "a": float(np.mean([np.argmax(r != s) if np.any(r != s) else len(r) for r, s in zip(ta, tb)])
                        / ta.shape[1]), "b": None},
        ]
    answers = [run / "answers" / source / "reference.json" for run in (this, other)]
    rows.append({"what": "A(p)", **{k: _json(p)["mean_accuracy"] if p.exists() else None
                                    for k, p in zip("ab", answers)}})
    for candidate in CANDIDATES:
        measured = [run / "compression" / source / "measured" / f"{candidate}.json" for run in (this, other)]
        if not all(p.exists() for p in measured):
            continue
        a, b = (_json(p) for p in measured)
        for key in ("f", "ppl", "accuracy_mean", "s_res_bytes"):
            rows.append({"what": f"{candidate}: {key}", "a": a.get(key), "b": b.get(key)})
        rows.append({"what": f"{candidate}: decode TPS", "a": (a.get("decode") or {}).get("tps"),
                     "b": (b.get("decode") or {}).get("tps")})
    frame = pd.DataFrame(rows)
    frame["a / b - 1"] = [x / y - 1 if isinstance(x, float) and isinstance(y, (int, float)) and y else None
                         for x, y in zip(frame["a"], frame["b"])]
    return (f"a: {this}, b: {other}\n\n" + frame.to_markdown(index=False, floatfmt=".8g"))
