"""The package's engines with the real embedded model: S0 launched as a process on loopback, llama.cpp's
detokenizer against the source tokenizer."""

import httpx
import pytest
from serving_helpers import stream_completion, transformers_greedy

from infbench.serving import servers

pytestmark = pytest.mark.slow


def test_s0_streams_greedy_token_ids_with_usage(tmp_path, smollm2_source):
    out, _ = smollm2_source
    spec = servers.ServerSpec(
        command=[
            "{python}",
            "-m",
            "infbench.serving.starter",
            "--model",
            "{model_dir}",
            "--port",
            "{port}",
            "--dtype",
            "float32",
            "--threads",
            "1",
            "--context-limit",
            "{context_limit}",
        ],
        startup_timeout_s=300,
    )
    prompt = list(range(2000, 2024))
    with servers.launched(
        "S0", spec, servers.LaunchVars(model_dir=str(out / "hf"), context_limit=64), tmp_path / "s0.log"
    ) as base:
        body = {
            "prompt": prompt,
            "max_tokens": 6,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        chunks = stream_completion(base, body, timeout=120)
        too_long = httpx.post(base + "/v1/completions", json={"prompt": prompt, "max_tokens": 60}, timeout=60)
    ids = [i for c in chunks for ch in c["choices"] for i in ch["token_ids"]]
    assert chunks[-1]["usage"] == {"prompt_tokens": 24, "completion_tokens": 6, "total_tokens": 30}
    assert too_long.status_code == 400 and "context limit 64" in too_long.text

    assert ids == transformers_greedy(out / "hf", prompt, 6)
    assert "Uvicorn running" in (tmp_path / "s0.log").read_text() or (tmp_path / "s0.log").stat().st_size > 0


def test_llamacpp_writes_every_token_as_the_source_tokenizer_does(smollm2_source):
    """Every id of the vocabulary: the llama.cpp server's text is the transformers tokenizer's (special tokens
    as no text, which the streaming check allows). llama-cpp-python's own detokenize loses the 47 ids whose
    piece is longer than 32 bytes."""
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from infbench.serving.llamacpp_server import Pieces

    out, record = smollm2_source
    llm = Llama(model_path=record.origin_gguf, vocab_only=True, verbose=False)
    tok = AutoTokenizer.from_pretrained(out / "hf")
    special = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    pieces = Pieces(llm)
    assert llm.n_vocab() == len(tok)
    wrong = [i for i in range(len(tok)) if pieces.decode([i]) != ("" if i in special else tok.decode([i]))]
    assert not wrong, [(i, pieces.decode([i]), tok.decode([i])) for i in wrong[:5]]
    long = [i for i in range(len(tok)) if len(pieces.piece(i)) > 32]
    assert len(long) == 47 and all(llm.detokenize([i]) == b"" for i in long)
    assert pieces.decode(long[:2]) == tok.decode(long[:2])
