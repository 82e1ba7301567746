"""Held-out answers (PROTOCOL B5): the submission answers the reference record's questions greedily
(the same token-id prompts, budgets and stop sequences as the plain transformers reference). It passes iff

- its count of correct answers is near the reference's: ``k_cand >= max(0, k_ref - floor(slack * n))`` (slack
  0.1, n 20 in the paper), and
- its answers are the reference's (not in the paper): its extracted answer equals the reference's greedy one
  (an empty one included) on at least ``max(1, floor(answers_agreement_share * n))`` questions.

The count alone has no power where the reference answers few questions correctly (``k_ref <= floor(slack * n)``:
a server answering nothing passes it); the agreement does not depend on the reference being right. An empty
answer agrees only where the reference's is empty too, so a server that answers nothing (EOS at once) fails
whenever the reference answered more than ``n - max(1, floor(share * n))`` questions (power 1 then, whatever its
accuracy: 11 of 20 at share 0.5); greedy answers of another, weaker model agree with the reference's on few.

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


def agreement_needed(n: int, share: float) -> int:
    """Answers of ``n`` that must agree with the reference's (at least one)."""
    return max(1, math.floor(share * n))


def agrees(candidate: reference.AnswerItem, ref: reference.AnswerItem) -> bool:
    """The candidate's extracted answer is the reference's (no answer agrees only with no answer)."""
    return (candidate.extracted or "") == (ref.extracted or "")


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
    answered = sum(bool(r.extracted) for r in ref.answers)
    agreed = sum(agrees(c, r) for c, r in zip(judged, ref.answers))
    agree_need = agreement_needed(n, settings.answers_agreement_share) if n else 0
    passed = k_cand >= need and agreed >= agree_need
    agreement = f"{agreed}/{n} answers agreed with the reference's (it answered {answered}), needed {agree_need}"
    return Check(
        name="held_out_answers",
        passed=passed,
        summary=(
            f"{k_cand}/{n} correct, reference {ref.k_ref}/{n}, needed {need}; {agreement}"
            + (f"; {len(errors)} answer(s) not accepted, e.g. {errors[0]}" if errors else "")
        ),
        evidence={
            "n": n,
            "k_cand": k_cand,
            "k_ref": ref.k_ref,
            "needed": need,
            "reference_answered": answered,
            "agreed": agreed,
            "agreement_needed": agree_need,
            "agreement_share": settings.answers_agreement_share,
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
                    "agrees": agrees(c, r),
                }
                for c, r in zip(judged, ref.answers)
            ],
        },
    )
