"""The uniform GPTQ baseline with the real GPTQModel on the real embedded source."""

import json

import numpy as np
import pytest

from infbench.compression.baselines import gptq
from infbench.compression.harness.greedy import greedy
from infbench.compression.runtimes.hf import HFRunner
from infbench.compression.submission import GIB, load_manifest
from infbench.config.model import CorpusSpec
from infbench.package_files import package_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contexts_file(smollm2_source, tmp_path_factory):
    from infbench.compression import contexts

    out = tmp_path_factory.mktemp("gptq_contexts")
    src, _ = smollm2_source
    contexts.build(
        "smollm2-135m",
        src / "hf",
        src / "source.json",
        out / "contexts.parquet",
        out / "contexts.json",
        set_name="search",
        corpus=CorpusSpec(type="embedded"),
        contexts_per_set=4,
        context_tokens=32,
        continuation_tokens=8,
        seed=0,
    )
    return out / "contexts.parquet"


def test_width_choice_follows_the_limit(smollm2_source):
    src, _ = smollm2_source
    shapes = gptq.tensor_shapes(src / "hf")
    assert shapes.head is None  # SmolLM2 ties its output head to the embedding: kept in BF16
    sizes = {b: gptq.estimate_bytes(shapes, b, 128, 0) for b in (8, 4, 3, 2)}
    assert sizes[8] > sizes[4] > sizes[3] > sizes[2]
    limit = (sizes[3] + sizes[4]) / 2 / GIB
    assert gptq.plans(shapes, limit, [8, 4, 3, 2], 128, 0) == [(3, False), (2, False)]
    assert gptq.plans(shapes, sizes[2] / 2 / GIB, [8, 4, 3, 2], 128, 0) == [(2, False)]


@pytest.fixture(scope="module")
def untied(smollm2_source, tmp_path_factory):
    """A small Llama with its own output head (SmolLM2's tokenizer): the head is most of the model."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("untied") / "hf"
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=49152,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=False,
        )
    ).to(torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(smollm2_source[0] / "hf").save_pretrained(out)
    return out


def test_the_output_head_is_quantized_only_when_the_limit_needs_it(untied, contexts_file, tmp_path):
    shapes = gptq.tensor_shapes(untied)
    assert shapes.head == (64, 49152)
    extra = sum(p.stat().st_size for p in untied.iterdir() if p.name.startswith("tokenizer"))
    bf16_head = {b: gptq.estimate_bytes(shapes, b, 32, extra) for b in (8, 4)}
    q_head = {b: gptq.estimate_bytes(shapes, b, 32, extra, quantize_head=True) for b in (8, 4)}
    assert gptq.plans(shapes, bf16_head[8] * 1.01 / GIB, [8, 4], 32, extra)[0] == (8, False)
    # room for 8-bit layers only with an 8-bit head: the width wins over the head's precision
    limit = (q_head[8] + min(bf16_head[8], bf16_head[4])) / 2 / GIB
    assert q_head[8] < limit * GIB < bf16_head[4]
    assert gptq.plans(shapes, limit, [8, 4], 32, extra)[0] == (8, True)
    result = gptq.package(
        untied,
        "untied",
        limit,
        tmp_path / "pkg",
        corpus=CorpusSpec(type="embedded"),
        contexts_parquet=str(contexts_file),
        bit_widths=[8, 4],
        group_size=32,
        damp_percent=0.01,
        act_order=True,
        calibration_samples=2,
        calibration_tokens=32,
        calibration_seed=0,
    )
    chosen = result["chosen"]
    assert (chosen["bits"], chosen["head"]) == (8, "GPTQ 8-bit")
    assert chosen["package_bytes"] == package_bytes(tmp_path / "pkg") <= limit * GIB
    assert abs(chosen["package_bytes"] - chosen["estimated_bytes"]) / chosen["package_bytes"] < 0.01
    config = json.loads((tmp_path / "pkg" / "model" / "config.json").read_text())
    assert config["quantization_config"]["lm_head"] is True
    runner = HFRunner(tmp_path / "pkg" / "model", "cpu")
    assert type(runner.model.lm_head).__name__ != "Linear"  # a GPTQ kernel, not a BF16 matrix
    logits = runner.score(np.arange(100, 108, dtype=np.int64)[None], 2)
    assert logits.shape == (1, 2, 49152) and logits.float().isfinite().all()


def test_quantized_package_fits_and_runs(smollm2_source, contexts_file, tmp_path):
    src, _ = smollm2_source
    extra = sum(p.stat().st_size for p in (src / "hf").iterdir() if p.name.startswith("tokenizer"))
    limit = gptq.estimate_bytes(gptq.tensor_shapes(src / "hf"), 4, 128, extra) * 1.02 / GIB
    result = gptq.package(
        src / "hf",
        "smollm2-135m",
        limit,
        tmp_path / "pkg",
        corpus=CorpusSpec(type="embedded"),
        contexts_parquet=str(contexts_file),
        bit_widths=[8, 4, 3, 2],
        group_size=128,
        damp_percent=0.01,
        act_order=True,
        calibration_samples=2,
        calibration_tokens=32,
        calibration_seed=0,
    )
    chosen = result["chosen"]
    assert (chosen["bits"], chosen["head"]) == (
        4,
        "none (tied to the embedding)",
    )  # 576-wide rows with group 128: the partial last group is handled
    assert chosen["package_bytes"] == package_bytes(tmp_path / "pkg") <= limit * GIB
    assert abs(chosen["package_bytes"] - chosen["estimated_bytes"]) / chosen["package_bytes"] < 0.01
    manifest = load_manifest(tmp_path / "pkg")
    assert manifest.runtime == "hf"
    config = json.loads((tmp_path / "pkg" / manifest.weights / "config.json").read_text())
    assert config["quantization_config"]["bits"] == 4
    runner = HFRunner(tmp_path / "pkg" / manifest.weights, "cpu")
    ids = np.arange(100, 112, dtype=np.int64)[None]
    logits = runner.score(ids, 3)
    assert logits.shape == (1, 3, 49152) and logits.float().isfinite().all()


def test_generation_dequantizes_once_per_batch_and_keeps_nothing(untied, contexts_file, tmp_path, monkeypatch):
    """The hf runtime lets GPTQModel's TorchLinear keep its dequantized weights for one batch's generation only:
    the tokens are those of dequantizing on every pass, and once the batch ends (released, or another batch
    begins) no layer holds a dequantized copy (resident storage is what it was after load)."""
    import contextlib

    import torch

    from infbench import bf16_on_cpu
    from infbench.compression.inprocess_memory import live_cpu_bytes
    from infbench.compression.runtimes import hf

    gptq.package(
        untied,
        "untied",
        1.0,
        tmp_path / "pkg",
        corpus=CorpusSpec(type="embedded"),
        contexts_parquet=str(contexts_file),
        bit_widths=[3],
        group_size=32,
        damp_percent=0.01,
        act_order=True,
        calibration_samples=2,
        calibration_tokens=32,
        calibration_seed=0,
    )
    runner = HFRunner(tmp_path / "pkg" / "model", "cpu")
    layers = [m for m in runner.model.modules() if type(m).__name__ == "TorchLinear"]
    assert layers and all(m.bits == 3 for m in layers)
    prompts = [list(range(100, 110)), list(range(200, 203))]
    tokens = [g.tokens for g in greedy(runner, prompts, 6)]
    with monkeypatch.context() as m:
        m.setattr(hf, "_dequantized_once", lambda model: contextlib.nullcontext())
        assert [g.tokens for g in greedy(runner, prompts, 6)] == tokens
    runner.release()
    after_load = live_cpu_bytes()
    runner.prefill([np.asarray(p) for p in prompts], 6)
    runner.step(np.asarray([5, 6]), np.asarray([0, 1]))
    assert any(m._cached_weights for m in layers)  # the batch's workspace, while it runs
    if not bf16_on_cpu.bf16_is_native():  # and there, float32 weights for float32 products (infbench.bf16_on_cpu)
        assert {w.dtype for m in layers for w in m._cached_weights.values()} == {torch.float32}
    runner.release()
    assert not any(m._cached_weights or m._cache_enabled for m in layers)
    assert live_cpu_bytes() == after_load


def test_middle_layers_are_centred_whole_layers():
    assert gptq.middle_layers(30, 0.5) == list(range(7, 22))
    assert gptq.middle_layers(4, 0.5) == [1, 2]
    assert gptq.middle_layers(3, 0.01) == [1]  # at least one


@pytest.fixture(scope="module")
def four_layers(smollm2_source, tmp_path_factory):
    """A small tied Llama of four decoder layers (SmolLM2's tokenizer)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("four_layers") / "hf"
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=49152,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=True,
        )
    ).to(torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(smollm2_source[0] / "hf").save_pretrained(out)
    return out


def test_a_mixed_width_variant_has_the_low_width_in_the_middle_layers_and_runs(four_layers, contexts_file, tmp_path):
    """compression.gptq.variants: 4-bit, 3-bit in the middle half (layers 1 and 2); group and damping from the
    variant, the rest from compression.gptq."""
    from safetensors import safe_open

    from infbench.config.model import GptqVariant

    variant = GptqVariant(name="mixed", bits=4, group_size=32, damp_percent=0.1, low_bits=3, low_bits_share=0.5)
    result = gptq.variant_package(
        four_layers,
        "tiny",
        tmp_path / "pkg",
        variant=variant,
        corpus=CorpusSpec(type="embedded"),
        contexts_parquet=str(contexts_file),
        group_size=128,
        damp_percent=0.01,
        act_order=True,
        calibration_samples=2,
        calibration_tokens=32,
        calibration_seed=0,
    )
    assert result["layer_bits"] == {1: 3, 2: 3} and result["group_size"] == 32 and result["damp_percent"] == 0.1
    manifest = load_manifest(tmp_path / "pkg")
    assert manifest.name == "gptq-mixed" and result["package_bytes"] == package_bytes(tmp_path / "pkg")
    weights = tmp_path / "pkg" / manifest.weights
    widths = {}
    with safe_open(str(next(weights.glob("*.safetensors"))), "pt") as f:
        for name in f.keys():
            if name.endswith("mlp.down_proj.qweight"):  # 128 input rows packed into int32 words of 32 bits
                widths[int(name.split(".")[2])] = f.get_slice(name).get_shape()[0] * 32 // 128
    assert widths == {0: 4, 1: 3, 2: 3, 3: 4}
    runner = HFRunner(weights, "cpu")
    logits = runner.score(np.arange(100, 108, dtype=np.int64)[None], 2)
    assert logits.shape == (1, 2, 49152) and logits.float().isfinite().all()
