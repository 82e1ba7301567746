"""Materializing the embedded source for real (SmolLM2-135M from its wheel)."""

import json
import subprocess

import numpy as np
import pytest
from conftest import EMBEDDED_ORIGIN, INFBENCH

from infbench import gguf_twin, sources
from infbench.errors import ConfigError, InputFileError
from infbench.hashing import sha256_file

pytestmark = pytest.mark.slow


def test_embedded_source_checkpoint_and_record(smollm2_source):
    out, record = smollm2_source
    assert record.n_params == 134_515_008
    assert record.max_position_embeddings == 8192 and record.vocab_size == 49152
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(record.files)
    for name, digest in record.files.items():
        assert sha256_file(out / "hf" / name) == digest
    from safetensors import safe_open

    with safe_open(out / "hf" / "model.safetensors", "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype.is_floating_point
        assert str(f.get_tensor("model.layers.0.self_attn.q_proj.weight").dtype) == "torch.bfloat16"
    assert sources.read_record(out / "source.json") == record


def test_infbench_source_as_a_command_writes_the_same_checkpoint(smollm2_source, tmp_path):
    out, record = smollm2_source
    proc = subprocess.run(
        [
            INFBENCH,
            "source",
            "smollm2-135m",
            "--origin",
            json.dumps(EMBEDDED_ORIGIN),
        ]
        + ["--out-dir", str(tmp_path / "hf"), "--record", str(tmp_path / "source.json")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == f"smollm2-135m: 134,515,008 parameters -> {tmp_path / 'hf'}\n"
    written = sources.read_record(tmp_path / "source.json")
    assert written.files == record.files and written.n_params == record.n_params


def test_f16_twin_holds_the_checkpoint_values(smollm2_source, tmp_path):
    import gguf
    from safetensors.torch import load_file

    out, record = smollm2_source
    twin = tmp_path / "f16.gguf"
    gguf_twin.build_twin(record.origin_gguf, out / "hf", twin, None)
    reader = gguf.GGUFReader(twin)
    assert reader.fields["general.file_type"].contents() == 1
    assert reader.fields["llama.context_length"].contents() == 8192
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 272
    weights = load_file(out / "hf" / "model.safetensors")
    pairs = {
        "token_embd.weight": "model.embed_tokens.weight",
        "blk.3.ffn_down.weight": "model.layers.3.mlp.down_proj.weight",
        "blk.3.attn_norm.weight": "model.layers.3.input_layernorm.weight",
    }
    for gname, hname in pairs.items():
        a = np.asarray(tensors[gname].data, dtype=np.float32).reshape(weights[hname].shape)
        assert np.array_equal(a, weights[hname].float().numpy()), gname


def test_unreadable_gguf_names_the_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(InputFileError, match="broken.gguf: not a readable GGUF"):
        sources.materialize(
            "m", sources.SourceOrigin(type="local", path=str(bad)), tmp_path / "hf", tmp_path / "r.json"
        )
    assert not (tmp_path / "hf").exists() and not (tmp_path / "r.json").exists()


def test_missing_package_and_path_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="sources.m.origin.distribution.*not installed"):
        sources.resolve_gguf(
            "m", sources.SourceOrigin(type="python_package", distribution="no-such-dist", path="x.gguf")
        )
    with pytest.raises(ConfigError, match="sources.m.origin.path"):
        sources.resolve_gguf("m", sources.SourceOrigin(type="local", path=str(tmp_path / "missing")))


def test_twin_of_a_checkpoint_needs_the_converter(tmp_path):
    with pytest.raises(ConfigError, match="llama_cpp.convert_hf_to_gguf"):
        gguf_twin.build_twin(None, tmp_path, tmp_path / "x.gguf", None)
    assert not (tmp_path / "x.gguf").exists()
