"""The uniform GPTQ baseline with the real GPTQModel on the real embedded source."""

import json

import numpy as np
import pytest

from infbench.compression.baselines import gptq
from infbench.compression.runtimes.hf import HFRunner
from infbench.compression.submission import GIB, load_manifest, package_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contexts_file(smollm2_source, tmp_path_factory):
    from infbench.compression import contexts

    out = tmp_path_factory.mktemp("gptq_contexts")
    src, _ = smollm2_source
    contexts.build("smollm2-135m", src / "hf", src / "source.json", out / "contexts.parquet", out / "contexts.json",
                   corpus={"type": "embedded"}, contexts_per_set=4, context_tokens=32, continuation_tokens=8,
                   seed=0)
    return out / "contexts.parquet"


def test_width_choice_follows_the_limit(smollm2_source):
    src, _ = smollm2_source
    sizes = {b: gptq.estimate_bytes(src / "hf", b, 128, 0) for b in (8, 4, 3, 2)}
    assert sizes[8] > sizes[4] > sizes[3] > sizes[2]
    limit = (sizes[3] + sizes[4]) / 2 / GIB
    assert gptq.choose_bits(src / "hf", limit, [8, 4, 3, 2], 128, 0)[0] == 3
    assert gptq.choose_bits(src / "hf", sizes[2] / 2 / GIB, [8, 4, 3, 2], 128, 0) == [2]


def test_quantized_package_fits_and_runs(smollm2_source, contexts_file, tmp_path):
    src, _ = smollm2_source
    extra = sum(p.stat().st_size for p in (src / "hf").iterdir() if p.name.startswith("tokenizer"))
    limit = gptq.estimate_bytes(src / "hf", 4, 128, extra) * 1.02 / GIB
    result = gptq.package(src / "hf", "smollm2-135m", limit, tmp_path / "pkg",
                          corpus={"type": "embedded"}, contexts_parquet=str(contexts_file), bit_widths=[8, 4, 3, 2],
                          group_size=128, damp_percent=0.01, act_order=True, calibration_samples=2,
                          calibration_tokens=32, calibration_seed=0)
    chosen = result["chosen"]
    assert chosen["bits"] == 4  # 576-wide rows with group 128: the partial last group is handled
    assert chosen["package_bytes"] == package_bytes(tmp_path / "pkg") <= limit * GIB
    assert abs(chosen["package_bytes"] - chosen["estimated_bytes"]) / chosen["package_bytes"] < 0.01
    manifest = load_manifest(tmp_path / "pkg")
    assert manifest.runtime == "hf"
    config = json.loads((tmp_path / "pkg" / manifest.weights / "config.json").read_text())
    assert config["quantization_config"]["bits"] == 4
    runner = HFRunner(tmp_path / "pkg" / manifest.weights, "cpu")
    ids = np.arange(100, 112, dtype=np.int64)[None]
    logits = runner.logits(ids, 3)
    assert logits.shape == (1, 3, 49152) and np.isfinite(logits).all()
