"""How the reference continues far-context carriers, and what the ``far_context`` check sees (issue 21).

The carriers of the pipeline's own replay prompts (its workload, content seed and ``serving.workload``
settings; the first ``carriers`` found in a development draw) are continued greedily by: the reference
(transformers, ``serving.verification.reference_dtype``) reading the whole prompt; the reference reading only
the last W ids (a server that keeps only the end of a prompt); and llama.cpp on the GGUF twin, if given
(the honest reference engine). Every path is scored by the reference with the whole prompt, as the check
scores a server's stream. Per band of source distance: how often the reference's first id is the copy and its
margin, and, per server, the share of the clear positions (margin at least ``far_context_margin``) whose id is
not the reference's top-1.
"""

from __future__ import annotations

import itertools

import pandas as pd
import torch

from infbench import atomic
from infbench.config.model import ServingSettings
from infbench.hf_loading import cache_kwargs
from infbench.serving import workload
from infbench.serving.replay_settings import ReplaySettings
from infbench.serving.verify.far_context import clear_misses
from infbench.serving.verify.fidelity import Scores, teacher_forced_logits
from infbench.serving.verify.reference import load_model

BANDS = (64, 128, 256, 512, 1024, 2048, 1 << 30)


@torch.inference_mode()
def greedy(model, prompt: list[int], n: int) -> list[int]:
    """``n`` greedy ids after ``prompt``, EOS not special (a replay ignores it)."""
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    ids: list[int] = []
    for _ in range(n):
        ids.append(int(out.logits[0, -1].argmax()))
        out = model(input_ids=torch.tensor([ids[-1:]]), use_cache=True, **cache_kwargs(out))
    return ids


def measure(
    serving: ServingSettings,
    sessions_path: str,
    model_dir: str,
    gguf: str | None,
    carriers: int,
    keeps: tuple[int, ...],
    seed: int = 0,
) -> pd.DataFrame:
    """One row per carrier: its distance, the reference's first-position copy and margin, and per server
    (``full``, ``last<W>``, ``llamacpp``) its clear positions and misses."""
    settings = serving.verification
    model, _ = load_model(model_dir, settings.reference_dtype)
    llm = None
    if gguf:
        from llama_cpp import Llama

        llm = Llama(model_path=gguf, n_ctx=serving.deployment.context_limit, verbose=False)
    builder = ReplaySettings.for_serving(serving, "http://unused", 1, seed, {}).prompt_builder()
    rows = []
    draw = workload.draw(workload.load(sessions_path), seed)
    for instance, session in enumerate(itertools.islice(draw, 10_000)):
        for r in session.requests:
            c = builder.carrier(session, instance, r.id)
            if c is None:
                continue
            prompt = builder.build(session, instance, r)
            paths = {"full": greedy(model, prompt, r.output_tokens)}
            paths |= {f"last{w}": greedy(model, prompt[-w:], r.output_tokens) for w in keeps if w < c.distance}
            if llm is not None:
                gen = llm.generate(prompt, temp=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True)
                paths["llamacpp"] = [next(gen) for _ in range(r.output_tokens)]
            first = Scores.of(teacher_forced_logits(model, prompt, paths["full"][:1]), paths["full"][:1])
            row = {
                "distance": c.distance,
                "prompt_tokens": len(prompt),
                "output_tokens": r.output_tokens,
                "copies_first": paths["full"][0] == c.copied(prompt, 1)[0],
                "first_margin": float(first.top[0, 0] - first.top[0, 1]),
            }
            for name, path in paths.items():
                clear, misses = clear_misses(
                    Scores.of(teacher_forced_logits(model, prompt, path), path), settings.far_context_margin
                )
                row[f"{name}_clear"], row[f"{name}_missed"] = clear, len(misses)
            rows.append(row)
            if len(rows) >= carriers:
                return pd.DataFrame(rows)
    return pd.DataFrame(rows)


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per band of source distance: carriers, first-id copies and margins, each server's missed clear
    positions."""
    rows = rows.assign(band=pd.cut(rows["distance"], BANDS, right=False))
    out = []
    for band, g in rows.groupby("band", observed=True):
        row = {
            "source distance": f"{band.left}-{min(band.right, int(g['distance'].max()) + 1) - 1}",
            "carriers": len(g),
            "reference copies first id": f"{int(g['copies_first'].sum())}/{len(g)}",
            "first-id margin (median, nats)": round(float(g["first_margin"].median()), 2),
        }
        for server in [c[: -len("_clear")] for c in rows.columns if c.endswith("_clear")]:
            clear, missed = g[f"{server}_clear"].dropna().sum(), g[f"{server}_missed"].dropna().sum()
            row[f"{server}: missed / clear"] = f"{int(missed)}/{int(clear)}" if clear else "-"
        out.append(row)
    return pd.DataFrame(out)


def run(
    serving: ServingSettings,
    sessions_path: str,
    model_dir: str,
    gguf: str | None,
    carriers: int,
    keeps: tuple[int, ...],
    out_md: str | None = None,
) -> str:
    md = table(measure(serving, sessions_path, model_dir, gguf, carriers, keeps)).to_markdown(index=False)
    if out_md:
        atomic.write_text(out_md, md + "\n")
    return md
