"""The pipeline's own runtimes behind the package interface (infbench.compression.package_api), on the real
embedded source: a batch of prompts of different lengths generates what each prompt alone does, one-pass
scoring gives what revealing the tokens one at a time does, and a model that is not causal is refused."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from infbench.compression.harness.greedy import greedy
from infbench.compression.harness.likelihood import teacher_forced
from infbench.compression.runtimes.hf import HFRunner, NotCausal
from infbench.compression.runtimes.llama_cpp import LlamaCppRunner
from infbench.compression.scoring import target_log_probs

pytestmark = pytest.mark.slow

PROMPTS = [list(range(300, 305)), list(range(1000, 1090)), list(range(5000, 5033))]
# Largest log-prob difference between two ways of computing one position. llama.cpp multiplies a ubatch of one
# token by quantized weights on another kernel path than a ubatch of many (activations quantized differently):
# on random tokens through the Q4_1 source, one-pass scoring and one token at a time differ by up to 0.28 nats.
# transformers in float32 agrees to rounding.
TOLERANCE = {"hf": 2e-3, "llama.cpp": 0.5}


@pytest.fixture(scope="module")
def runners(smollm2_source):
    src, record = smollm2_source
    return {
        "hf": HFRunner(src / "hf", "cpu", dtype="float32"),
        "llama.cpp": LlamaCppRunner(Path(record.origin_gguf), threads=2),
    }


@pytest.mark.parametrize("runtime", ["hf", "llama.cpp"])
def test_rows_of_a_batch_are_independent_and_end_on_their_own(runners, runtime):
    """The same prompt in two rows of a batch generates the same tokens with the same log-probs, whatever the rows
    between them; a row that ends leaves the others as they were."""
    runner = runners[runtime]
    batch = greedy(runner, [PROMPTS[0], PROMPTS[1], PROMPTS[0]], 8)
    assert batch[0].tokens == batch[2].tokens
    assert np.allclose(batch[0].logprobs, batch[2].logprobs, atol=1e-4)
    ended = greedy(
        runner, [PROMPTS[0], PROMPTS[1], PROMPTS[0]], 8, done=lambda row, tokens: row == 1 and len(tokens) == 2
    )
    assert [len(g.tokens) for g in ended] == [8, 2, 8]
    assert ended[0].tokens == ended[2].tokens == batch[0].tokens
    runner.release()


def test_a_batch_generates_what_each_prompt_alone_does(runners):
    """transformers in float32: a left-padded batch of prompts of different lengths gives each prompt's own
    tokens. (llama.cpp multiplies a ubatch of one token on another kernel path than one of many, so a row's
    tokens may leave the prompt-alone path at a near-tie: the accuracy gate reports what batching moved.)"""
    runner = runners["hf"]
    batched = greedy(runner, PROMPTS, 8)
    alone = [greedy(runner, [p], 8)[0] for p in PROMPTS]
    for b, a in zip(batched, alone):
        assert b.tokens == a.tokens
        assert np.allclose(b.logprobs, a.logprobs, atol=TOLERANCE["hf"])
    runner.release()


@pytest.mark.parametrize("runtime", ["hf", "llama.cpp"])
def test_one_pass_scoring_is_revealing_tokens_one_at_a_time(runners, runtime):
    rng = np.random.default_rng(0)
    contexts, continuations = rng.integers(0, 49152, (3, 20)), rng.integers(0, 49152, (3, 12))
    one_pass = teacher_forced(runners[runtime], contexts, continuations, batch_size=2, one_pass=True)
    stepped = teacher_forced(runners[runtime], contexts, continuations, batch_size=2, one_pass=False)
    assert np.abs(one_pass - stepped).max() < TOLERANCE[runtime]
    # a later token changes nothing before it
    changed = continuations.copy()
    changed[:, 6:] = rng.integers(0, 49152, (3, 6))
    again = teacher_forced(runners[runtime], contexts, changed, batch_size=2, one_pass=True)
    assert np.abs(again[:, :6] - one_pass[:, :6]).max() == 0
    runners[runtime].release()


def test_a_checkpoint_asking_for_bidirectional_attention_is_refused(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    HFRunner(tmp_path / "m", "cpu")  # causal: loads
    cfg = json.loads((tmp_path / "m/config.json").read_text())
    (tmp_path / "m/config.json").write_text(json.dumps({**cfg, "use_bidirectional_attention": True}))
    with pytest.raises(NotCausal, match="use_bidirectional_attention"):
        HFRunner(tmp_path / "m", "cpu")


def test_bf16_logits_leave_the_runtime_in_bf16(runners, smollm2_source):
    runner = HFRunner(smollm2_source[0] / "hf", "cpu")  # the checkpoint's own dtype
    assert runner.score(np.arange(100, 110)[None], 3).dtype == torch.bfloat16
    assert runner.prefill([np.arange(100, 110)], 2).dtype == torch.bfloat16
    runner.release()


def test_llama_cpp_computes_a_shared_prefix_once_and_gives_what_each_row_alone_does(runners):
    """Rows that begin alike (the gate's few-shot examples) share their prefix's cache cells; each row still
    generates and scores what it does alone, and a scored row that begins as the previous one did gives what a
    fresh context gives (to llama.cpp's batch-shape tolerance)."""
    runner = runners["llama.cpp"]
    rng = np.random.default_rng(1)
    prefix = [int(t) for t in rng.integers(100, 40000, 70)]
    prompts = [prefix + [int(t) for t in rng.integers(100, 40000, n)] for n in (3, 17, 9)]
    batch = greedy(runner, prompts, 6)
    assert runner._batch.ctx.n_ctx() < sum(map(len, prompts)) + 3 * 6  # the prefix's cells are shared
    for row, prompt in zip(batch, prompts):
        alone = greedy(runner, [prompt], 6)[0]
        assert np.abs(np.asarray(row.logprobs[:1]) - np.asarray(alone.logprobs[:1])).max() < TOLERANCE["llama.cpp"]
    answers = [[int(t) for t in rng.integers(100, 40000, 5)] for _ in prompts]
    reused = [runner.score(np.asarray([p + a[:-1]]), 5) for p, a in zip(prompts, answers)]
    for (p, a), logits in zip(zip(prompts, answers), reused):
        runner.release()
        fresh = runner.score(np.asarray([p + a[:-1]]), 5)
        target = torch.as_tensor([a])
        diff = target_log_probs(torch.as_tensor(logits), target) - target_log_probs(torch.as_tensor(fresh), target)
        assert diff.abs().max() < TOLERANCE["llama.cpp"]
    runner.release()
    assert runner._batch is None and runner._scoring is None
