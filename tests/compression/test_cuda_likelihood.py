"""The CUDA paths of the likelihood stage and the outside memory meter: the fused scorer kernel, the CUDA-graph
sampler, NVML's per-process device memory. Skipped where no GPU is visible (CI has none; the CPU paths are
covered by test_scoring, test_sampling and test_batched_decoding); run on a GPU machine with
``pytest tests/compression/test_cuda_likelihood.py``."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from infbench import gpu_memory
from infbench.compression import batched_decoding, sampling, scoring

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def llama_cuda():
    """A small random Llama with grouped-query attention, float32 on the GPU and a copy on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    cpu = LlamaForCausalLM(cfg).eval()
    cuda = LlamaForCausalLM(cfg).eval()
    cuda.load_state_dict(cpu.state_dict())
    return cuda.cuda(), cpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_scorer_kernel_matches_the_cpu_arithmetic(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(3, 257, 50_000, generator=gen)).to(dtype)
    target = torch.randint(0, 50_000, (3, 257), generator=gen)
    on_gpu = scoring.target_log_probs(logits.cuda(), target.cuda()).cpu()
    on_cpu = scoring.target_log_probs(logits, target)
    exact = torch.log_softmax(logits.double(), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    assert on_gpu.dtype == torch.float32 and on_gpu.shape == target.shape
    assert float((on_gpu - on_cpu).abs().max()) < 1e-5  # float32 rounding of values about -12
    assert float((on_gpu.double() - exact).abs().max()) < 1e-5


def _sample(model, ctx, indices, **kw):
    args = dict(
        set_name="search", n_tokens=300, temperature=1.0, seed=0, batch_size=len(ctx), progress=False, kv_window=64
    )
    args.update(kw)
    return sampling.sample_transformers(model, ctx, indices, **args)


def test_cuda_graph_sampling_equals_eager_and_does_not_depend_on_the_batch(llama_cuda):
    model, _ = llama_cuda
    ctx = np.random.default_rng(0).integers(0, 4096, size=(6, 40)).astype(np.int32)
    graphs = _sample(model, ctx, list(range(6)))
    eager = _sample(model, ctx, list(range(6)), cuda_graphs=False)
    assert np.array_equal(graphs.tokens, eager.tokens)
    assert np.allclose(graphs.logprobs, eager.logprobs, atol=1e-5)
    order = [4, 1, 5, 0, 3, 2]
    regrouped = _sample(model, ctx[order], order, batch_size=4)
    assert np.array_equal(regrouped.tokens, graphs.tokens[order])
    assert np.allclose(regrouped.logprobs, graphs.logprobs[order], atol=1e-5)


@pytest.fixture(scope="module")
def llama_bf16(llama_cuda):
    """The same Llama in bf16 on the GPU (head size 32)."""
    from transformers import LlamaForCausalLM

    model, _ = llama_cuda
    bf16 = LlamaForCausalLM(model.config).to(device="cuda", dtype=torch.bfloat16).eval()
    bf16.load_state_dict(model.state_dict())
    return bf16


def test_exact_decoding_matches_a_full_forward_pass(llama_bf16):
    assert batched_decoding.exact_decoding(llama_bf16)
    ids = torch.as_tensor(np.random.default_rng(3).integers(0, 4096, size=(5, 300)), device="cuda")
    runs = []
    with torch.inference_mode():
        full = llama_bf16(ids).logits[:, 39:].float()
        for graphs in (True, False):
            dec = batched_decoding.decoder(llama_bf16, 5, 300, window=64, cuda_graphs=graphs)
            assert dec.mask is None and dec.exact is not None
            try:
                # a replay overwrites the graph's output: each step's logits are copied out
                steps = [dec.prefill(ids[:, :40])] + [dec.step(ids[:, t]).clone() for t in range(40, 300)]
            finally:
                dec.close()
            decoded = torch.stack(steps, dim=1).float()
            # bf16 kernels (the decode kernel vs SDPA over the whole sequence): bf16 rounding
            assert float((decoded - full).norm() / full.norm()) < 2e-2
            runs.append(decoded)
    assert torch.equal(runs[0], runs[1])  # graph replays run the eager step's kernels


@pytest.mark.parametrize("splits", [None, 1])  # here several per row; one, as when the rows fill the device
@pytest.mark.parametrize(
    "dtype, heads, kv_heads, dim",
    [(torch.bfloat16, 32, 8, 64), (torch.bfloat16, 8, 8, 128), (torch.float32, 12, 4, 32), (torch.float16, 4, 1, 256)],
)
def test_decode_kernel_reads_each_rows_own_length(dtype, heads, kv_heads, dim, splits):
    from infbench.compression import cuda_attention

    gen = torch.Generator(device="cuda").manual_seed(0)
    batch, slots = 6, 700  # slots: not a multiple of the kernel's split
    lengths = torch.tensor([1, 63, 64, 300, 513, 700], dtype=torch.int32, device="cuda")
    query, key, value = (
        torch.randn(shape, generator=gen, device="cuda").to(dtype)
        for shape in ((batch, heads, 1, dim), (batch, kv_heads, slots, dim), (batch, kv_heads, slots, dim))
    )
    key[1, :, 63:] = float("nan")  # slots past a row's length are never read
    out = cuda_attention.decode_attention(query, key, value, lengths, None, splits=splits)
    assert out.shape == (batch, 1, heads, dim) and out.dtype == dtype
    for b, n in enumerate(lengths.tolist()):
        ref = torch.nn.functional.scaled_dot_product_attention(
            query[b : b + 1].double(), key[b : b + 1, :, :n].double(), value[b : b + 1, :, :n].double(), enable_gqa=True
        ).transpose(1, 2)
        error = float((out[b : b + 1].double() - ref).norm() / ref.norm())
        assert error < (1e-5 if dtype == torch.float32 else 1e-2), (b, n, error)


def test_cuda_draw_is_the_cpu_draw():
    gen = torch.Generator().manual_seed(1)
    for rows, vocab, scale in ((64, 128_256, 3.0), (300, 97, 1.0), (2048, 3000, 12.0)):
        logp = torch.log_softmax(scale * torch.randn(rows, vocab, generator=gen), -1)
        logp[0, 5:] = float("-inf")  # a row with five tokens of non-zero probability
        uniforms = torch.rand(rows, generator=gen, dtype=torch.float64)
        on_gpu = sampling.draw(logp.cuda(), uniforms.cuda()).cpu()
        assert torch.equal(on_gpu, sampling.draw(logp, uniforms)), (rows, vocab)
        assert int(on_gpu[0]) < 5


def test_a_batch_chosen_by_memory_counts_the_allocators_cached_blocks(llama_bf16):
    block = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    del block  # 4 GiB now cached by PyTorch's allocator, not free to the driver
    free, _ = torch.cuda.mem_get_info()
    assert batched_decoding.free_device_bytes(torch.device("cuda")) >= free + (4 << 30)
    torch.cuda.empty_cache()


def test_cuda_and_cpu_draw_the_same_continuations(llama_cuda):
    model, cpu = llama_cuda
    ctx = np.random.default_rng(1).integers(0, 4096, size=(6, 40)).astype(np.int32)
    on_gpu = _sample(model, ctx, list(range(6)), n_tokens=100)
    on_cpu = _sample(cpu, ctx, list(range(6)), n_tokens=100)
    same = [np.array_equal(a, b) for a, b in zip(on_gpu.tokens, on_cpu.tokens)]
    assert sum(same) >= 5, same  # one float32 near-tie may fork a row; the streams are the same
    assert np.allclose(on_gpu.logprobs[same], on_cpu.logprobs[same], atol=1e-4)


CHILD = """
import sys, torch
torch.zeros(1, device="cuda")
print("ready", flush=True); sys.stdin.readline()
block = torch.empty(2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("allocated", flush=True); sys.stdin.readline()
"""


def test_nvml_sees_a_known_allocation_of_a_child_process():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "ready"
        context = gpu_memory.device_bytes({child.pid})
        child.stdin.write("\n"), child.stdin.flush()
        assert child.stdout.readline().strip() == "allocated"
        allocated = gpu_memory.device_bytes({child.pid})
        none = gpu_memory.device_bytes({idle.pid, os.getpid() + 10**6})
    finally:
        for proc in (child, idle):
            proc.stdin.close()
            proc.wait(timeout=60)
    print(
        f"NVML: CUDA context {context / 2**20:.1f} MiB, after a 1 GiB allocation "
        f"{allocated / 2**20:.1f} MiB (+{(allocated - context) / 2**20:.1f} MiB)"
    )
    assert context > 0
    assert 2**30 <= allocated - context <= 2**30 + 8 * 2**20
    assert none == 0
