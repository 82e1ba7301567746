"""Fidelity (PROTOCOL B5): suspicious continuations scored by the reference model under teacher forcing.

Candidates are the continuations the submission streamed in the held-out replays (prompts rebuilt
from the seeded workload), the EOS probes and the context probes. Suspects, up to
``fidelity_max_suspects``: the context probes' continuations, then in turn the next of three
rankings: continuations with a run of at least ``fidelity_repeat_run`` identical tokens or tokens
after an EOS (longest run first); the lowest-likelihood ones, by their mean log-probability under the
reference with only the last ``fidelity_proxy_context`` prompt tokens as context (a cheap ranking);
the ones with the longest prompts (where a truncated prompt shows).
Each suspect is then scored with its full prompt: per token, the regret is the reference's best
log-probability minus the streamed token's; the check fails if any regret exceeds the tolerance (4.0).
Continuations the model really produces, repetition included, have regret ~0; padding, random
tokens, text of another model or text conditioned on a truncated prompt do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from infbench.serving.trace import Session
from infbench.serving.verify.common import CheckResult, VerifySettings
from infbench.serving.workload import PromptBuilder


@dataclass
class Candidate:
    origin: str
    prompt: list[int]
    output: list[int]
    kind: str = ""
    rank: float = 0.0


def longest_run(ids: list[int]) -> int:
    best = run = 0
    prev = None
    for t in ids:
        run = run + 1 if t == prev else 1
        prev = t
        best = max(best, run)
    return best


def replay_candidates(frame: pd.DataFrame, sessions: list[Session], token_range: tuple[int, int],
                      marker_tokens: int, limit: int = 256) -> list[Candidate]:
    by_id = {s.id: s for s in sessions}
    builders: dict[str, PromptBuilder] = {}
    out = []
    for r in frame.itertuples():
        ids = [int(t) for t in r.streamed_token_ids]
        if not ids or r.session_id not in by_id:
            continue
        session = by_id[r.session_id]
        req = next((q for q in session.requests if q.id == r.request_id), None)
        if req is None:
            continue
        b = builders.setdefault(r.run_id, PromptBuilder(token_low=token_range[0], token_high=token_range[1],
                                                        marker_tokens=marker_tokens, run_key=r.run_id))
        out.append(Candidate(f"replay {r.session_id}#{r.instance}/{r.request_id}", b.build(session, r.instance, req),
                             ids))
        if len(out) >= limit:
            break
    return out


@torch.inference_mode()
def _logits(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + output[:-1]])
    return model(input_ids=ids).logits[0, -len(output):].float()


def select_suspects(model, cands: list[Candidate], eos: set[int], settings: VerifySettings) -> list[Candidate]:
    """Context probes first, then round robin over three rankings: repeated runs / tokens after EOS
    (longest run first), lowest proxy likelihood, longest prompt (where a truncated prompt shows)."""
    probes = [c for c in cands if c.kind]
    flagged, rest = [], []
    for c in cands:
        if c.kind:
            continue
        run = longest_run(c.output)
        after_eos = any(t in eos for t in c.output[:-1])
        if run >= settings.fidelity_repeat_run or after_eos:
            c.kind = ", ".join(k for k, on in ((f"repeated-token run of {run}", run >= settings.fidelity_repeat_run),
                                               ("tokens after EOS", after_eos)) if on)
            c.rank = -run
            flagged.append(c)
        else:
            rest.append(c)
    flagged.sort(key=lambda c: c.rank)
    unlikely: list[Candidate] = []
    if settings.fidelity_max_suspects > len(probes):
        for c in flagged + rest:
            logits = _logits(model, c.prompt[-settings.fidelity_proxy_context:], c.output)
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.output)[:, None]).squeeze(-1)
            c.rank = float(lp.mean())
        unlikely = sorted(flagged + rest, key=lambda c: c.rank)
    longest = sorted(flagged + rest, key=lambda c: -len(c.prompt))
    chosen, seen = list(probes[:settings.fidelity_max_suspects]), {id(c) for c in probes}
    queues = [(list(flagged), None), (unlikely, "low likelihood (proxy mean log-prob {:.2f})"),
              (longest, "long prompt ({} tokens)")]
    while len(chosen) < settings.fidelity_max_suspects and any(q for q, _ in queues):
        for queue, why in queues:
            while queue and id(queue[0]) in seen:
                queue.pop(0)
            if queue and len(chosen) < settings.fidelity_max_suspects:
                c = queue.pop(0)
                seen.add(id(c))
                if why:
                    c.kind = why.format(c.rank if "likelihood" in why else len(c.prompt))
                chosen.append(c)
    return chosen


def regrets(model, c: Candidate) -> torch.Tensor:
    logits = _logits(model, c.prompt, c.output)
    return logits.max(-1).values - logits.gather(-1, torch.tensor(c.output)[:, None]).squeeze(-1)


def fidelity(model, cands: list[Candidate], eos: set[int], settings: VerifySettings) -> CheckResult:
    suspects = select_suspects(model, cands, eos, settings)
    scored, worst = [], None
    for c in suspects:
        r = regrets(model, c)
        i = int(r.argmax())
        row = {"origin": c.origin, "why": c.kind, "prompt_tokens": len(c.prompt), "output_tokens": len(c.output),
               "max_regret": float(r[i]), "at": i, "token": c.output[i],
               "tokens_over_tolerance": int((r > settings.fidelity_regret_tolerance).sum())}
        scored.append(row)
        if worst is None or row["max_regret"] > worst["max_regret"]:
            worst = row
    tol = settings.fidelity_regret_tolerance
    failed = [s for s in scored if s["max_regret"] > tol]
    if not scored:
        summary = f"no continuation to score ({len(cands)} candidates)"
    elif failed:
        summary = (f"{len(failed)} of {len(scored)} suspects exceed the regret tolerance {tol}: worst "
                   f"{worst['max_regret']:.2f} at token {worst['at']} of {worst['origin']} ({worst['why']})")
    else:
        summary = f"{len(scored)} suspects scored, max regret {worst['max_regret']:.3f} <= {tol}"
    return CheckResult(name="fidelity", passed=not failed, summary=summary,
                       evidence={"candidates": len(cands), "tolerance": tol, "suspects": scored})
