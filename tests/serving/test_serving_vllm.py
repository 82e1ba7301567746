"""vLLM 0.32.0 (its own environment, .venv-vllm) serves the embedded model as the server submission
examples/servers/vllm: started once in the server sandbox under .venv-vllm's interpreter on one charged CPU
(``--enforce-eager``: about 35 s), it streams token ids with usage and the source tokenizer's text, decodes
greedily as transformers does, generates exactly ``max_tokens`` with ``ignore_eos`` and refuses a prompt over
its context limit. The config's trusted ``vllm`` spec (calibration baselines) renders the same interpreter."""

import httpx
import pytest
import verify_helpers as vh
from conftest import REPO, needs_sandbox, needs_vllm
from serving_helpers import stream_completion, transformers_greedy

from infbench.config.model import SandboxSettings, default_servers
from infbench.serving import servers
from infbench.serving.verify import submission

pytestmark = [pytest.mark.slow, needs_vllm(), needs_sandbox()]

CONTEXT_LIMIT = 256


def test_vllm_serves_greedy_token_ids_with_usage(tmp_path, smollm2_source):
    out, _ = smollm2_source
    launch = servers.LaunchVars(model_dir=str(out / "hf"), model_name="smollm2", context_limit=CONTEXT_LIMIT)
    assert servers.render("vllm", default_servers()["vllm"], launch)[0].endswith(".venv-vllm/bin/python")
    example = submission.load(REPO / "examples/servers-vllm/vllm")
    # float32, as the transformers decoding below
    directory = vh.example(
        tmp_path, "vllm", root_in_repo="examples/servers-vllm", command=[*example.command, "--dtype", "float32"]
    )
    sub = submission.load(directory)
    assert submission.interpreter(sub).endswith(".venv-vllm/bin/python")
    assert submission.missing_requirements(sub, directory, SandboxSettings()) == []
    prompt = list(range(2000, 2024))
    body = {
        "model": "smollm2",
        "prompt": prompt,
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **sub.request_fields,
    }
    with (
        submission.workspace(directory) as workdir,
        submission.running(sub, launch, workdir, tmp_path / "vllm.log", SandboxSettings(), charged_cpus=1) as server,
    ):
        base = server.base_url
        record = server.sandbox
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
    assert record.kind == "bwrap", record
    assert any(d.startswith("vllm") and d.endswith("==0.32.0") for d in record.distributions), record.distributions
    assert record.cpus is not None and len(record.cpus.allowed) == 1  # the one CPU it is charged for
    assert "/sys/devices/system/cpu" in record.read_only
