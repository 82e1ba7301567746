"""What verification compares a submission with, computed once per source from a plain transformers
implementation of the checkpoint (``results/serving/reference/verification.json``):

- EOS probes: candidate prompts (chat-formatted short requests when the tokenizer has a chat template,
  and filler prompts, both drawn with the operator's secret: a request template, its words and
  numbers, the filler ids) are decoded greedily up to ``eos_max_tokens``; a candidate whose greedy
  decoding reaches EOS at step ``t`` becomes the prompt ``candidate + greedy[:t - lead]`` whose
  expected continuation is the ``lead`` greedy tokens and the EOS. The probes with the widest
  top-1 margins on those steps are kept, so a faithful engine's rounding does not change the path.
- Held-out answers: ``answers_n`` questions split over ``answers_benchmarks``, drawn with a seed
  derived from the operator's secret from the same question sets as the compression track (prompts, budgets
  and stop sequences of ``answers``), answered greedily; the prompts are stored as token ids so the
  submission receives exactly the same input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, Field

from infbench import atomic, provenance
from infbench.config.model import AnswerSettings, VerifySettings
from infbench.errors import ConfigError
from infbench.evaluation import judge, prompts, questions
from infbench.evaluation.generation import eos_ids, greedy
from infbench.hashing import file_hashes, sha256_text
from infbench.hf_loading import cache_kwargs, load_causal_lm
from infbench.operator_secret import OperatorSecret

# Short chat requests an instruct model answers in a few tokens; {w} {v} are words, {a} {b} numbers, {c} a
# category, all drawn with the operator's secret (about 10^6 distinct requests).
CHAT_TEMPLATES = (
    "Say {w}.",
    "Reply with one word: {w} or {v}.",
    "What is {a}+{b}?",
    "What is {a} times {b}?",
    "Spell {w}.",
    "Name a {c}.",
    "Is {a} bigger than {b}?",
    "Repeat after me: {w} {v}.",
    "Give me a number between {a} and {b}.",
    "What number comes after {a}?",
    "Write the word {w} in capitals.",
    "Say {w} twice.",
    "Is a {w} a {c}?",
    "Thank you for the {w}!",
)
WORDS = (
    "hello",
    "goodbye",
    "apple",
    "river",
    "stone",
    "cloud",
    "table",
    "window",
    "garden",
    "bread",
    "candle",
    "mirror",
    "pencil",
    "rocket",
    "tiger",
    "violin",
    "winter",
    "summer",
    "yellow",
    "orange",
    "purple",
    "castle",
    "forest",
    "island",
    "ladder",
    "lemon",
    "magnet",
    "needle",
    "ocean",
    "pepper",
    "planet",
    "silver",
    "spoon",
    "tomato",
    "turtle",
    "wallet",
    "bottle",
    "button",
    "carpet",
    "dragon",
    "engine",
    "feather",
    "guitar",
    "hammer",
    "jacket",
    "kettle",
    "lantern",
    "marble",
    "pillow",
    "rabbit",
)
CATEGORIES = (
    "colour",
    "fruit",
    "animal",
    "city",
    "country",
    "planet",
    "month",
    "vegetable",
    "sport",
    "musical instrument",
    "tool",
    "bird",
    "flower",
    "drink",
    "vehicle",
)


class EosProbe(BaseModel):
    prompt: list[int]
    expected: list[int]
    margin: float


class AnswerItem(BaseModel):
    benchmark: str
    id: str
    prompt_ids: list[int]
    max_tokens: int
    stop: list[str]
    response: str = ""
    extracted: str | None = None
    correct: bool = False


class VerificationReference(BaseModel):
    source: str
    eos_token_ids: list[int]
    special_tokens: list[str]
    eos_probes: list[EosProbe]
    eos_candidates_tried: int
    answers: list[AnswerItem]
    k_ref: int
    drawn_with: dict[str, str] = Field(
        description="kind and fingerprint of the operator secret the probe candidates and questions were drawn with"
    )
    provenance: provenance.Provenance


def load_model(checkpoint: str | Path, dtype: str):
    """The reference model (on the CPU) and its tokenizer."""
    from transformers import AutoTokenizer

    return load_causal_lm(str(checkpoint), dtype, "cpu"), AutoTokenizer.from_pretrained(checkpoint)


@torch.inference_mode()
def _greedy(model, prompt: list[int], steps: int, eos: set[int]) -> tuple[list[int], list[float]]:
    ids, cache, out, margins = torch.tensor([prompt]), {}, [], []
    for _ in range(steps):
        res = model(input_ids=ids, use_cache=True, **cache)
        logits = res.logits[0, -1].float()
        top = torch.topk(logits, 2)
        token = int(top.indices[0])
        out.append(token)
        margins.append(float(top.values[0] - top.values[1]))
        if token in eos:
            break
        ids, cache = torch.tensor([[token]]), cache_kwargs(res)
    return out, margins


def chat_request(rng: np.random.Generator) -> str:
    w, v = rng.choice(len(WORDS), size=2, replace=False)
    a, b = sorted(rng.choice(np.arange(2, 1000), size=2, replace=False).tolist())
    template = CHAT_TEMPLATES[int(rng.integers(len(CHAT_TEMPLATES)))]
    return template.format(w=WORDS[w], v=WORDS[v], a=a, b=b, c=CATEGORIES[int(rng.integers(len(CATEGORIES)))])


def candidate_prompts(tokenizer, n: int, token_range: tuple[int, int], secret: OperatorSecret) -> list[list[int]]:
    """``n`` candidates drawn with the secret: chat requests (when the tokenizer has a chat template), and
    filler prompts of 8 random ids from the second half on."""
    rng = np.random.default_rng(secret.seed("serving.eos_candidates"))
    chat = getattr(tokenizer, "chat_template", None)
    cands = []
    for i in range(n):
        if chat and i < (n + 1) // 2:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": chat_request(rng)}], add_generation_prompt=True, tokenize=True
            )
            cands.append(list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
        else:
            cands.append(rng.integers(token_range[0], token_range[1], 8).tolist())
    return cands


def greedy_text(model, tokenizer, prompt: list[int], max_new_tokens: int, stop: list[str]) -> str:
    """Plain greedy decoding of one token-id prompt (no padding), stopping at EOS or a stop sequence."""
    ids = torch.tensor([prompt])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return greedy(model, tokenizer, inputs, max_new_tokens, stop, eos_ids(tokenizer, model.generation_config))[0]


def find_eos_probes(
    model, tokenizer, settings: VerifySettings, token_range: tuple[int, int], secret: OperatorSecret
) -> tuple[list[EosProbe], int]:
    eos = set(eos_ids(tokenizer, model.generation_config))
    found, tried = [], 0
    cands = candidate_prompts(tokenizer, settings.eos_candidates, token_range, secret)
    for cand in cands:
        tried += 1
        out, margins = _greedy(model, cand, settings.eos_max_tokens - 1, eos)
        if not out or out[-1] not in eos:
            continue
        t = len(out) - 1
        cut = max(0, t - settings.eos_lead_tokens)
        found.append(EosProbe(prompt=cand + out[:cut], expected=out[cut:], margin=min(margins[cut:])))
        if sum(len(p.expected) > settings.eos_lead_tokens for p in found) >= 2 * settings.eos_probes:
            break  # enough to choose the widest margins from
    # prefer probes that make the server produce the full lead before EOS, then the widest margins
    found.sort(key=lambda p: (len(p.expected) <= settings.eos_lead_tokens, -p.margin))
    return found[: settings.eos_probes], tried


def select_questions(
    answer_settings: AnswerSettings, settings: VerifySettings, secret: OperatorSecret
) -> list[tuple[questions.Question, tuple[questions.Question, ...]]]:
    """(question, few-shot exemplars): ``answers_n`` split over the benchmarks, drawn with the secret."""
    out = []
    k = len(settings.answers_benchmarks)
    for i, bench in enumerate(settings.answers_benchmarks):
        n = settings.answers_n // k + (1 if i < settings.answers_n % k else 0)
        cfg = answer_settings.benchmark(bench)
        pool, fewshot, _ = questions.question_pool(answer_settings, bench, secret.seed("serving.answers"))
        if n > len(pool):
            raise ConfigError(
                "serving.verification.answers_n",
                f"{n} {bench} questions needed, the question pool has only {len(pool)}",
            )
        for q in questions.select(pool, n, secret.seed("serving.answers"), bench):
            out.append((q, tuple(fewshot[: cfg.shots])))
    return out


def answer_items(
    tokenizer, answer_settings: AnswerSettings, settings: VerifySettings, secret: OperatorSecret
) -> list[AnswerItem]:
    items = []
    for q, shots in select_questions(answer_settings, settings, secret):
        cfg = answer_settings.benchmark(q.benchmark)
        items.append(
            AnswerItem(
                benchmark=q.benchmark,
                id=q.id,
                prompt_ids=tokenizer(prompts.build_prompt(q, shots))["input_ids"],
                max_tokens=cfg.max_new_tokens,
                stop=list(cfg.stop),
            )
        )
    return items


def judge_items(
    items: list[AnswerItem],
    responses: list[str],
    answer_settings: AnswerSettings,
    settings: VerifySettings,
    secret: OperatorSecret,
) -> list[AnswerItem]:
    by_id = {(q.benchmark, q.id): q for q, _ in select_questions(answer_settings, settings, secret)}
    out = []
    for item, completion in zip(items, responses):
        response = judge.truncate_at_stop(completion, item.stop)
        extracted, ok = judge.judge_text(by_id[(item.benchmark, item.id)], response)
        out.append(item.model_copy(update={"response": response, "extracted": extracted, "correct": ok}))
    return out


def compute(
    source: str,
    checkpoint: str,
    answer_settings: AnswerSettings,
    settings: VerifySettings,
    token_range: tuple[int, int],
    out_json: str,
    secret: OperatorSecret,
    threads: int | None = None,
) -> VerificationReference:
    if threads:
        torch.set_num_threads(threads)
    model, tokenizer = load_model(checkpoint, settings.reference_dtype)
    probes, tried = find_eos_probes(model, tokenizer, settings, token_range, secret)
    items = answer_items(tokenizer, answer_settings, settings, secret)
    responses = [greedy_text(model, tokenizer, item.prompt_ids, item.max_tokens, item.stop) for item in items]
    items = judge_items(items, responses, answer_settings, settings, secret)
    weights = sha256_text("".join(f"{k}:{v}\n" for k, v in file_hashes(checkpoint).items()))
    record = VerificationReference(
        source=source,
        eos_token_ids=eos_ids(tokenizer, model.generation_config),
        special_tokens=list(tokenizer.all_special_tokens),
        eos_probes=probes,
        eos_candidates_tried=tried,
        answers=items,
        k_ref=sum(i.correct for i in items),
        drawn_with=secret.public(),
        provenance=provenance.collect(
            {
                "source": source,
                "verification": settings.model_dump(mode="json"),
                "answers": answer_settings.model_dump(mode="json"),
                "operator_secret": secret.public(),
            },
            {"checkpoint": weights},
        ),
    )
    atomic.write_json(out_json, record.model_dump(mode="json"))
    return record


def read(path: str | Path) -> VerificationReference:
    return VerificationReference.model_validate_json(Path(path).read_text())
