"""Fidelity (PROTOCOL B5): suspicious continuations scored by the reference model under teacher forcing.

Candidates are the continuations the submission streamed in the held-out replays after warmup (every
final seed; prompts rebuilt from each replay's content seed), the EOS probes and the context probes.
Suspects:

- the context probes' continuations, always;
- ``fidelity_sampled_suspects`` continuations drawn from all post-warmup replay records of every
  final seed, stratified over time: the window is cut into that many equal strata and one record is
  drawn from each (strata left empty give their draw to the remaining records), so the end of a
  replay is sampled as often as its start and a server that is honest first and cheap later is
  caught. The draw uses a seed derived from the operator's secret, so a server cannot know which
  requests will be scored;
- targeted suspects, up to ``fidelity_max_suspects`` with the context probes: in turn the next of
  three rankings: continuations with a run of at least ``fidelity_repeat_run`` identical tokens or
  tokens after an EOS (longest run first); the lowest-likelihood ones, by their mean log-probability
  under the reference with only the last ``fidelity_proxy_context`` prompt tokens as context (a cheap
  ranking, computed on at most ``fidelity_proxy_pool`` candidates drawn over time like the sampled
  suspects); the ones with the longest prompts (where a truncated prompt shows).

Each suspect is then scored with its full prompt: per token, the regret is the reference's best
log-probability minus the streamed token's; the check fails if any regret exceeds the tolerance (4.0).
Continuations the model really produces, repetition included, have regret ~0; padding, random
tokens, text of another model or text conditioned on a truncated prompt do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from infbench.checks import Check
from infbench.config.model import VerifySettings
from infbench.serving.carriers import Carrier
from infbench.serving.sessions import Session
from infbench.serving.workload import PromptBuilder


@dataclass
class Candidate:
    origin: str
    prompt_tokens: int
    output: list[int]
    build: Callable[[], list[int]]
    kind: str = ""
    rank: float = 0.0
    position: float | None = None  # where in the replay window it was sent (0 = start, 1 = end)
    carrier: Carrier | None = None  # a replay request's far-context carrier, if its prompt has one
    _prompt: list[int] | None = field(default=None, repr=False)
    _scores: Scores | None = field(default=None, repr=False)

    @property
    def prompt(self) -> list[int]:
        if self._prompt is None:
            self._prompt = self.build()
        return self._prompt

    def scored(self, model) -> Scores:
        """The reference's scores of the output under teacher forcing with the full prompt (computed once)."""
        if self._scores is None:
            self._scores = Scores.of(teacher_forced_logits(model, self.prompt, self.output), self.output)
        return self._scores


@dataclass(frozen=True)
class Scores:
    """Per output position: the reference's two best log-probabilities and ids, and the output id's."""

    top: torch.Tensor  # [n, 2] log-probabilities, best first
    top_ids: torch.Tensor  # [n, 2]
    chosen: torch.Tensor  # [n]

    @classmethod
    def of(cls, logits: torch.Tensor, output: list[int]) -> Scores:
        lp = torch.log_softmax(logits, -1)
        top = lp.topk(2, -1)
        return cls(top.values, top.indices, lp.gather(-1, torch.tensor(output)[:, None]).squeeze(-1))

    @property
    def regrets(self) -> torch.Tensor:
        """The reference's best log-probability minus the output id's."""
        return self.top[:, 0] - self.chosen


def fixed(origin: str, prompt: list[int], output: list[int], kind: str = "") -> Candidate:
    """A probe's continuation (its prompt is known)."""
    return Candidate(origin, len(prompt), output, lambda: prompt, kind=kind, _prompt=prompt)


def longest_run(ids: list[int]) -> int:
    best = run = 0
    prev = None
    for t in ids:
        run = run + 1 if t == prev else 1
        prev = t
        best = max(best, run)
    return best


def replay_candidates(
    frames: list[tuple[int, pd.DataFrame]],
    sessions: list[Session],
    prompts: dict[int, PromptBuilder],
    warmup_s: float,
    window_s: float,
) -> list[Candidate]:
    """Every completed post-warmup request of every seed's replay, in seed and send order; ``prompts``: each
    seed's prompt builder (the one its replay sent)."""
    by_id = {s.id: s for s in sessions}
    out = []
    for seed, frame in frames:
        if frame.empty:
            continue
        for r in frame[frame["in_window"] & frame["ok"]].sort_values("send_time").itertuples():
            ids = [int(t) for t in r.streamed_token_ids]
            session = by_id.get(r.session_id)
            req = next((q for q in session.requests if q.id == r.request_id), None) if session else None
            if not ids or req is None:
                continue
            out.append(
                Candidate(
                    f"replay seed {seed} {r.session_id}#{r.instance}/{r.request_id}",
                    int(r.input_tokens),
                    ids,
                    lambda b=prompts[seed], s=session, i=r.instance, q=req: b.build(s, i, q),
                    position=min(max((r.send_time - warmup_s) / window_s, 0.0), 1.0),
                    carrier=prompts[seed].carrier(session, int(r.instance), req.id),
                )
            )
    return out


def stratified(cands: list[Candidate], k: int, rng: np.random.Generator) -> list[tuple[int, Candidate]]:
    """(stratum, candidate): one draw per equal time stratum of the window, empty strata's draws from the rest."""
    if k <= 0 or not cands:
        return []
    if len(cands) <= k:
        return [(min(int(c.position * k), k - 1), c) for c in cands]
    strata: dict[int, list[int]] = {}
    for i, c in enumerate(cands):
        strata.setdefault(min(int(c.position * k), k - 1), []).append(i)
    chosen = {s: members[int(rng.integers(len(members)))] for s, members in sorted(strata.items())}
    rest = [i for i in range(len(cands)) if i not in set(chosen.values())]
    extra = rng.choice(len(rest), size=k - len(chosen), replace=False) if k > len(chosen) else []
    picks = list(chosen.items()) + [(min(int(cands[rest[j]].position * k), k - 1), rest[j]) for j in extra]
    return [(s, cands[i]) for s, i in picks]


@torch.inference_mode()
def teacher_forced_logits(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """The reference's logits at each output position, teacher-forced (the head runs on those rows only)."""
    ids = torch.tensor([prompt + output[:-1]])
    return model(input_ids=ids, logits_to_keep=len(output)).logits[0].float()


def _proxy_rank(model, c: Candidate, context: int) -> float:
    logits = teacher_forced_logits(model, c.prompt[-context:], c.output)
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.output)[:, None]).squeeze(-1)
    return float(lp.mean())


def select_suspects(
    model,
    probes: list[Candidate],
    replays: list[Candidate],
    eos: set[int],
    settings: VerifySettings,
    rng: np.random.Generator,
) -> list[Candidate]:
    """Context probes, time-stratified samples of the replays, then round robin over three rankings:
    repeated runs / tokens after EOS (longest run first), lowest proxy likelihood, longest prompt."""
    context = [c for c in probes if c.kind]
    others = [c for c in probes if not c.kind] + replays
    chosen, seen = list(context), {id(c) for c in context}
    k = settings.fidelity_sampled_suspects
    for stratum, c in stratified(replays, k, rng):
        c.kind = f"sampled over time (stratum {stratum + 1} of {k}, at {100 * c.position:.0f}% of the window)"
        chosen.append(c)
        seen.add(id(c))
    flagged = []
    for c in others:
        run = longest_run(c.output)
        after_eos = any(t in eos for t in c.output[:-1])
        if run >= settings.fidelity_repeat_run or after_eos:
            c.rank = -run
            flagged.append(
                (
                    c,
                    ", ".join(
                        k
                        for k, on in (
                            (f"repeated-token run of {run}", run >= settings.fidelity_repeat_run),
                            ("tokens after EOS", after_eos),
                        )
                        if on
                    ),
                )
            )
    flagged.sort(key=lambda item: item[0].rank)
    budget = settings.fidelity_max_suspects - len(context)
    unlikely: list[tuple[Candidate, str]] = []
    if budget > 0:
        pool = [c for c in probes if not c.kind] + [
            c for _, c in stratified(replays, settings.fidelity_proxy_pool, rng)
        ]
        ranked = sorted(
            ((_proxy_rank(model, c, settings.fidelity_proxy_context), c) for c in pool), key=lambda item: item[0]
        )
        unlikely = [(c, f"low likelihood (proxy mean log-prob {r:.2f})") for r, c in ranked]
    longest = [(c, f"long prompt ({c.prompt_tokens} tokens)") for c in sorted(others, key=lambda c: -c.prompt_tokens)]
    queues = [flagged, unlikely, longest]
    targeted = 0
    while targeted < budget and any(queues):
        for queue in queues:
            while queue and id(queue[0][0]) in seen:
                queue.pop(0)
            if queue and targeted < budget:
                c, why = queue.pop(0)
                c.kind = why
                seen.add(id(c))
                chosen.append(c)
                targeted += 1
    return chosen


def fidelity(
    model,
    probes: list[Candidate],
    replays: list[Candidate],
    eos: set[int],
    settings: VerifySettings,
    rng: np.random.Generator,
    drawn_with: str,
) -> Check:
    suspects = select_suspects(model, probes, replays, eos, settings, rng)
    scored, worst = [], None
    for c in suspects:
        r = c.scored(model).regrets
        i = int(r.argmax())
        row = {
            "origin": c.origin,
            "why": c.kind,
            "prompt_tokens": c.prompt_tokens,
            "output_tokens": len(c.output),
            "max_regret": float(r[i]),
            "at": i,
            "token": c.output[i],
            "tokens_over_tolerance": int((r > settings.fidelity_regret_tolerance).sum()),
        }
        scored.append(row)
        if worst is None or row["max_regret"] > worst["max_regret"]:
            worst = row
    tol = settings.fidelity_regret_tolerance
    failed = [s for s in scored if s["max_regret"] > tol]
    sampled = sum(s["why"].startswith("sampled") for s in scored)
    if not scored:
        summary = f"no continuation to score ({len(probes) + len(replays)} candidates)"
    elif failed:
        summary = (
            f"{len(failed)} of {len(scored)} suspects exceed the regret tolerance {tol}: worst "
            f"{worst['max_regret']:.2f} at token {worst['at']} of {worst['origin']} ({worst['why']})"
        )
    else:
        summary = (
            f"{len(scored)} suspects ({sampled} sampled over time from {len(replays)} post-warmup "
            f"continuations) scored, max regret {worst['max_regret']:.3f} <= {tol}"
        )
    return Check(
        name="fidelity",
        passed=bool(scored) and not failed,
        summary=summary,
        evidence={
            "candidates": len(probes) + len(replays),
            "replay_candidates": len(replays),
            "sampled_suspects": sampled,
            "drawn_with": drawn_with,
            "tolerance": tol,
            "suspects": scored,
        },
    )
