"""Held-out answers (PROTOCOL B5): the submission answers the reference record's questions greedily
(the same token-id prompts, budgets and stop sequences as the plain transformers reference); it passes
iff ``k_cand >= max(0, k_ref - floor(slack * n))`` (slack 0.1, n 20 in the paper).
"""

from __future__ import annotations

import math
from typing import Any

from infbench.compression.answers.settings import AnswerSettings
from infbench.serving.verify import probes, reference
from infbench.serving.verify.common import CheckResult, VerifySettings


def threshold(k_ref: int, n: int, slack: float) -> int:
    return max(0, k_ref - math.floor(slack * n))


def held_out_answers(base_url: str, model: str, ref: reference.VerificationReference, answer_settings: AnswerSettings,
                     settings: VerifySettings, timeout_s: float,
                     request_fields: dict[str, Any] | None = None) -> CheckResult:
    responses, errors = [], []
    last: probes.Completion | None = None
    for item in ref.answers:
        if last is not None and probes.fatal(last):
            errors.append(f"{item.benchmark}/{item.id}: not sent (server gone or hung)")
            responses.append("")
            continue
        c = probes.complete(base_url, model, item.prompt_ids, item.max_tokens, ignore_eos=False, timeout_s=timeout_s,
                            request_fields=request_fields, stop=item.stop)
        last = c
        if c.error:
            errors.append(f"{item.benchmark}/{item.id}: {c.error}")
        text = c.text if not c.error else ""
        for s in ref.special_tokens:
            text = text.replace(s, "")
        responses.append(text)
    judged = reference.judge_items(ref.answers, responses, answer_settings, settings)
    n = len(judged)
    k_cand = sum(i.correct for i in judged)
    need = threshold(ref.k_ref, n, settings.answers_slack)
    passed = k_cand >= need
    return CheckResult(
        name="held_out_answers", passed=passed,
        summary=(f"{k_cand}/{n} correct, reference {ref.k_ref}/{n}, needed {need}"
                 + (f"; {len(errors)} request(s) failed, e.g. {errors[0]}" if errors else "")),
        evidence={"n": n, "k_cand": k_cand, "k_ref": ref.k_ref, "needed": need, "slack": settings.answers_slack,
                  "errors": errors[:5],
                  "items": [{"benchmark": c.benchmark, "id": c.id, "candidate": c.response[:200],
                             "candidate_correct": c.correct, "reference": r.response[:200],
                             "reference_correct": r.correct} for c, r in zip(judged, ref.answers)]})
