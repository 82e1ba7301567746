"""Held-out answers (PROTOCOL B5): the submission answers the reference record's questions greedily
(the same token-id prompts, budgets and stop sequences as the plain transformers reference); it passes
iff ``k_cand >= max(0, k_ref - floor(slack * n))`` (slack 0.1, n 20 in the paper).

What is judged is the text of the streamed token ids (special tokens skipped, as the reference's own
answers); an answer whose streamed text is not its ids' text (:mod:`.source_text`) counts as wrong.
"""

from __future__ import annotations

import math
from typing import Any

from infbench.checks import Check
from infbench.config.model import AnswerSettings, VerifySettings
from infbench.operator_secret import OperatorSecret
from infbench.serving.verify import probes, reference
from infbench.serving.verify.source_text import SourceText


def threshold(k_ref: int, n: int, slack: float) -> int:
    return max(0, k_ref - math.floor(slack * n))


def held_out_answers(
    base_url: str,
    model: str,
    ref: reference.VerificationReference,
    answer_settings: AnswerSettings,
    settings: VerifySettings,
    timeout_s: float,
    text: SourceText,
    secret: OperatorSecret,
    request_fields: dict[str, Any] | None = None,
) -> Check:
    responses, errors = [], []
    last: probes.Completion | None = None
    for item in ref.answers:
        if last is not None and probes.fatal(last):
            errors.append(f"{item.benchmark}/{item.id}: not sent (server gone or hung)")
            responses.append("")
            continue
        c = probes.complete(
            base_url,
            model,
            item.prompt_ids,
            item.max_tokens,
            ignore_eos=False,
            timeout_s=timeout_s,
            request_fields=request_fields,
            stop=item.stop,
        )
        last = c
        problem = c.error or (
            f"{c.text_chunks_without_ids} chunk(s) carried text without token ids"
            if c.text_chunks_without_ids
            else text.mismatch(c.ids, c.text)
        )
        if problem:
            errors.append(f"{item.benchmark}/{item.id}: {problem}")
        responses.append("" if problem else text.plain(c.ids))
    judged = reference.judge_items(ref.answers, responses, answer_settings, settings, secret)
    n = len(judged)
    k_cand = sum(i.correct for i in judged)
    need = threshold(ref.k_ref, n, settings.answers_slack)
    passed = k_cand >= need
    return Check(
        name="held_out_answers",
        passed=passed,
        summary=(
            f"{k_cand}/{n} correct, reference {ref.k_ref}/{n}, needed {need}"
            + (f"; {len(errors)} answer(s) not accepted, e.g. {errors[0]}" if errors else "")
        ),
        evidence={
            "n": n,
            "k_cand": k_cand,
            "k_ref": ref.k_ref,
            "needed": need,
            "slack": settings.answers_slack,
            "drawn_with": secret.label,
            "errors": errors[:5],
            "items": [
                {
                    "benchmark": c.benchmark,
                    "id": c.id,
                    "candidate": c.response[:200],
                    "candidate_correct": c.correct,
                    "reference": r.response[:200],
                    "reference_correct": r.correct,
                }
                for c, r in zip(judged, ref.answers)
            ],
        },
    )
