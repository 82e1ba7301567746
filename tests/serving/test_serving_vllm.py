"""vLLM 0.32.0 (its own environment, .venv-vllm) serves the embedded model through the default `vllm` spec of
the config: started once with ``--enforce-eager`` (about 22 s on 2 idle cores, 110 s compiled), it streams
token ids with usage and the source tokenizer's text, decodes greedily as transformers does, generates exactly
``max_tokens`` with ``ignore_eos`` and refuses a prompt over its context limit."""

import httpx
import pytest
from conftest import needs_vllm
from serving_helpers import stream_completion, transformers_greedy

from infbench.config.model import default_servers
from infbench.serving import servers

pytestmark = [pytest.mark.slow, needs_vllm()]

CONTEXT_LIMIT = 256


def test_vllm_serves_greedy_token_ids_with_usage(tmp_path, smollm2_source):
    out, _ = smollm2_source
    spec = default_servers()["vllm"]
    # float32, as the transformers decoding below; eager: no compile at start
    spec = spec.model_copy(update={"command": [*spec.command, "--enforce-eager", "--dtype", "float32"]})
    launch = servers.LaunchVars(model_dir=str(out / "hf"), model_name="smollm2", context_limit=CONTEXT_LIMIT)
    assert servers.render("vllm", spec, launch)[0].endswith(".venv-vllm/bin/python")
    prompt = list(range(2000, 2024))
    body = {
        "model": "smollm2",
        "prompt": prompt,
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **spec.request_fields,
    }
    with servers.launched("vllm", spec, launch, tmp_path / "vllm.log") as base:
        chunks = stream_completion(base, body, timeout=300)
        too_long = httpx.post(
            base + "/v1/completions",
            json={"model": "smollm2", "prompt": list(range(2000, 2000 + CONTEXT_LIMIT)), "max_tokens": 8},
            timeout=60,
        )
    ids = [i for c in chunks for ch in c["choices"] for i in ch["token_ids"] or []]
    text = "".join(ch["text"] for c in chunks for ch in c["choices"])
    assert chunks[-1]["usage"] == {"prompt_tokens": 24, "completion_tokens": 6, "total_tokens": 30}
    assert all(ch["token_ids"] for c in chunks for ch in c["choices"] if ch["text"]), "text without its ids"
    assert too_long.status_code == 400

    from transformers import AutoTokenizer

    assert text == AutoTokenizer.from_pretrained(out / "hf").decode(ids, skip_special_tokens=False)
    assert ids == transformers_greedy(out / "hf", prompt, 6)
    assert "vllm.entrypoints.openai.api_server" in (tmp_path / "vllm.log").read_text()
