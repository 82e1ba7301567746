"""CompressionBench's stages on one device, timed, and compared with another run of them (a CPU run
against a CUDA run of the embedded default, say): ``infbench bench-stages``.

The stages are the pipeline's own: Snakemake runs the workflow in ``out_dir`` for the reference likelihood
of both sets and (unless ``likelihood_only``) the answers reference ``A(p)`` and the verification
measurements of the BF16 and starter packages, with ``likelihood.device``, ``verification.device`` and
``answers.device`` set to ``device`` and every other candidate, the agent runs and ServerBench left out. Seconds
per rule and stage come from the jobs' ``benchmark:`` files (:mod:`infbench.stage_times`); where the results
lie comes from :mod:`infbench.layout`. With ``compare`` (another run's ``out_dir``), this run's scorer also
scores the other run's continuations, so the reference PPL of identical tokens shows the kernels' difference
alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from infbench import atomic, stage_times
from infbench.layout import Layout
from infbench.plan import SETS

REPO = Path(__file__).resolve().parents[3]
CANDIDATES = ("bf16", "starter")


def stage_config(raw: dict[str, Any], device: str, origin: dict[str, Any] | None) -> dict[str, Any]:
    """``raw`` with every model-running stage on ``device`` and only what the benchmark times planned."""
    out = {k: v for k, v in raw.items() if k != "serving"}
    for section in ("likelihood", "verification", "answers"):
        out[section] = {**out.get(section, {}), "device": device}
    out["compression"] = {
        **out.get("compression", {}),
        "bf16": True,
        "starter": True,
        "gguf_types": [],
        "gptq": {**out.get("compression", {}).get("gptq", {}), "enabled": False, "variants": []},
        "released_gguf": {},
        "vllm_twins": [],
    }
    out["runs"] = {
        **out.get("runs", {}),
        "dir": "no-runs",
        "reference_search": {**out.get("runs", {}).get("reference_search", {}), "enabled": False},
    }
    if origin is not None:
        out["sources"] = {name: {**spec, "origin": origin} for name, spec in out["sources"].items()}
    return out


def targets(results: Layout, source: str, likelihood_only: bool) -> list[str]:
    out = [results.reference_summary(source, s) for s in SETS]
    if not likelihood_only:
        out += [results.answers_reference(source), *[results.measured(source, c) for c in CANDIDATES]]
    return out


def run(
    config_path: str,
    out_dir: str,
    *,
    device: str,
    origin: dict[str, Any] | None = None,
    compare: str | None = None,
    likelihood_only: bool = False,
    cores: int = 2,
) -> str:
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = stage_config(yaml.safe_load(Path(config_path).read_text()), device, origin)
    atomic.write_text(out / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    source = sorted(config["sources"])[0]
    results = Layout(str(out / "results"))
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    subprocess.run(
        [
            snakemake,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(out),
            "--cores",
            str(cores),
            "--configfile",
            str(out / "config.yaml"),
            "--rerun-incomplete",
            *[str(Path(t).relative_to(out)) for t in targets(results, source, likelihood_only)],
        ],
        check=True,
    )
    text = stage_times.report(out / "benchmarks")
    if compare:
        text += "\n" + comparison(
            results, Layout(str(Path(compare).resolve() / "results")), source, config, out / "cross"
        )
    atomic.write_text(out / "summary.md", text)
    return text


def _json(path: str) -> dict[str, Any]:
    import json

    return json.loads(Path(path).read_text())


def _cross_scores(this: Layout, other: Layout, source: str, config: dict[str, Any], cross: Path) -> None:
    """This run's scorer on the other run's continuations, each set (the pipeline's scoring function)."""
    from infbench import operator_secret
    from infbench.compression import likelihood
    from infbench.config.model import LikelihoodSettings, SecretSettings

    lc = LikelihoodSettings.model_validate(config["likelihood"])
    secret = operator_secret.load(SecretSettings.model_validate(config.get("operator_secret", {})))
    for set_name in SETS:
        likelihood.score_reference(
            source,
            this.checkpoint(source),
            other.continuations(source, set_name),
            str(cross / set_name / "reference_scores.parquet"),
            str(cross / set_name / "reference.json"),
            str(cross / set_name / "reference_top.npz"),
            top_k=lc.reference_top_k,
            backend=lc.backend,
            dtype=lc.dtype,
            device=lc.device,
            tensor_parallel=lc.tensor_parallel,
            batch_size=lc.score_batch_size,
            bootstrap_resamples=lc.bootstrap_resamples,
            seed=lc.seed,
            secret=secret,
        )


def comparison(this: Layout, other: Layout, source: str, config: dict[str, Any], cross: Path) -> str:
    """This run (a) against the other (b): the reference likelihood per set, the candidates' measurements."""
    from infbench.compression.likelihood_files import read_continuations, stack

    _cross_scores(this, other, source, config, cross)
    rows = []
    for set_name in SETS:
        a, b = (_json(run.reference_summary(source, set_name)) for run in (this, other))
        crossed = _json(str(cross / set_name / "reference.json"))
        ta, tb = (
            stack(read_continuations(run.continuations(source, set_name))["continuation_ids"], np.int32)
            for run in (this, other)
        )
        rows += [
            {"what": f"{set_name}: reference PPL", "a": a["ppl"], "b": b["ppl"]},
            {
                "what": f"{set_name}: reference PPL of b's continuations (a's scorer)",
                "a": crossed["ppl"],
                "b": b["ppl"],
            },
            {"what": f"{set_name}: sampler PPL", "a": a["sampler_ppl"], "b": b["sampler_ppl"]},
            {"what": f"{set_name}: F_self", "a": a["f_self"], "b": b["f_self"]},
            {
                "what": f"{set_name}: continuations identical in a and b (share of contexts)",
                "a": float(np.mean(np.all(ta == tb, axis=1))),
                "b": None,
            },
            {
                "what": f"{set_name}: tokens before the first difference (share)",
                "a": float(
                    np.mean([np.argmax(r != s) if np.any(r != s) else len(r) for r, s in zip(ta, tb)]) / ta.shape[1]
                ),
                "b": None,
            },
        ]
    answers = [Path(run.answers_reference(source)) for run in (this, other)]
    rows.append(
        {"what": "A(p)", **{k: _json(str(p))["mean_accuracy"] if p.exists() else None for k, p in zip("ab", answers)}}
    )
    for candidate in CANDIDATES:
        measured = [Path(run.measured(source, candidate)) for run in (this, other)]
        if not all(p.exists() for p in measured):
            continue
        a, b = (_json(str(p)) for p in measured)
        for key in ("f", "ppl", "accuracy_mean", "s_res_bytes"):
            rows.append({"what": f"{candidate}: {key}", "a": a.get(key), "b": b.get(key)})
        rows.append(
            {
                "what": f"{candidate}: decode TPS",
                "a": (a.get("decode") or {}).get("tps"),
                "b": (b.get("decode") or {}).get("tps"),
            }
        )
    frame = pd.DataFrame(rows)
    frame["a / b - 1"] = [
        x / y - 1 if isinstance(x, float) and isinstance(y, (int, float)) and y else None
        for x, y in zip(frame["a"], frame["b"])
    ]
    return f"a: {this.root}, b: {other.root}\n\n" + frame.to_markdown(index=False, floatfmt=".8g") + "\n"
