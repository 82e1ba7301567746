"""imatrix GGUF baselines (issue 24): the importance matrix of the real embedded source from activation hooks,
in llama.cpp's format, read by llama.cpp's own llama-quantize and used by llama.cpp's quantizer."""

import os
import subprocess

import numpy as np
import pytest

from infbench import llama_tools
from infbench.compression.baselines import calibration, gguf, imatrix
from infbench.config.model import CorpusSpec

pytestmark = pytest.mark.slow

CHUNKS, CHUNK_TOKENS = 8, 64


@pytest.fixture(scope="module")
def twin(smollm2_f16_twin):
    return smollm2_f16_twin


@pytest.fixture(scope="module")
def documents():
    """The embedded corpus in two halves: calibration text and held-out text."""
    docs, _ = calibration.documents(CorpusSpec(type="embedded"), 0)
    return docs[::2], docs[1::2]


@pytest.fixture(scope="module")
def matrix(smollm2_source, documents, tmp_path_factory):
    """The source's importance matrix from CHUNKS chunks of the calibration half, its file and its entries."""
    from transformers import AutoTokenizer

    from infbench.hf_loading import load_causal_lm

    hf = smollm2_source[0] / "hf"
    chunks = calibration.chunks(documents[0], AutoTokenizer.from_pretrained(hf), CHUNKS, CHUNK_TOKENS, 0)
    model = load_causal_lm(str(hf), "float32", "cpu")
    entries = imatrix.collect(model, imatrix.gguf_names(model, "llama"), chunks, batch_size=4)
    path = tmp_path_factory.mktemp("imatrix") / "imatrix.gguf"
    imatrix.write(path, entries, arch="llama", chunk_count=CHUNKS, chunk_size=CHUNK_TOKENS, datasets=["embedded"])
    return path, entries


def test_every_block_matrix_has_its_inputs_statistics(matrix, twin):
    path, entries = matrix
    assert imatrix.coverage(entries, twin) == []  # no block matrix of the twin without an entry
    assert len(entries) == 30 * 7 and all(e.count == CHUNKS * CHUNK_TOKENS for e in entries.values())
    for layer in (0, 29):
        blk = f"blk.{layer}"
        q, k, v = (entries[f"{blk}.attn_{m}.weight"].sums for m in "qkv")
        np.testing.assert_array_equal(q, k)  # one input, the normed hidden state, feeds q, k and v
        np.testing.assert_array_equal(q, v)
        np.testing.assert_array_equal(entries[f"{blk}.ffn_gate.weight"].sums, entries[f"{blk}.ffn_up.weight"].sums)
        assert entries[f"{blk}.ffn_down.weight"].sums.size == 1536 and q.size == 576
        assert not np.array_equal(q, entries[f"{blk}.ffn_gate.weight"].sums)  # another norm, another input
    weights = imatrix.weights(path)  # what llama-quantize hands the quantizer: in_sum2 / counts
    assert set(weights) == set(entries)
    for name, entry in entries.items():
        np.testing.assert_allclose(weights[name], entry.sums / entry.count, rtol=1e-6)


def test_llama_quantize_reads_the_file(matrix, twin, tmp_path):
    """llama.cpp's own llama-quantize loads the file (its GGUF imatrix reader, not ours) and quantizes with
    every entry."""
    try:
        tool = llama_tools.tool("llama-quantize")
    except llama_tools.ToolsMissing as missing:
        if os.environ.get("INFBENCH_REQUIRE_LLAMA_TOOLS") == "1":  # CI (.ci/run): setup-env.sh --tests built them
            raise
        pytest.skip(str(missing))
    path, entries = matrix
    out = subprocess.run(
        [str(tool), "--imatrix", str(path), str(twin), str(tmp_path / "iq3_s.gguf"), "IQ3_S", "2"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert f"loaded {len(entries)} importance matrix entries" in log and f"{CHUNKS} chunks" in log
    assert "did not find weights for blk." not in log


def test_llama_cpp_needs_the_matrix_for_iq2_xs_and_falls_back_on_576_wide_rows(matrix, twin, tmp_path):
    path, _ = matrix
    with pytest.raises(RuntimeError, match="imatrix|importance matrix"):
        gguf.quantize(twin, tmp_path / "plain.gguf", "IQ2_XS", 2)
    log = gguf.quantize(twin, tmp_path / "iq2_xs.gguf", "IQ2_XS", 2, imatrix=imatrix.weights(path))
    record = gguf.record("IQ2_XS", log, tmp_path / "iq2_xs.gguf", imatrix_sha256="-", imatrix_entries=210, seconds=0.0)
    assert record.without_imatrix == ["token_embd.weight"]  # a lookup table, no matrix product feeds it
    assert record.fallbacks and all(f.columns == 576 and f.columns % f.block for f in record.fallbacks)
    assert {f.used for f in record.fallbacks} <= {"IQ4_NL", "Q4_0", "Q5_0", "Q5_1", "Q8_0"}  # 32-wide blocks
    assert {f.tensor for f in record.fallbacks} == {
        n for n, t in record.tensor_types.items() if n.startswith("blk.") and t in {f.used for f in record.fallbacks}
    }
    down = {t for name, t in record.tensor_types.items() if name.endswith("ffn_down.weight")}
    # 1536-wide rows keep the 256-wide blocks: IQ2_XS, and Q2_K where llama.cpp's IQ2_XS mix gives some more bits
    assert down == {"IQ2_XS", "Q2_K"}


def _nll(gguf_file, rows: list[list[int]]) -> float:
    """Mean negative log-likelihood of ``rows`` under llama.cpp (each token after the first)."""
    import llama_cpp

    llm = llama_cpp.Llama(str(gguf_file), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    total, count = 0.0, 0
    for row in rows:
        llm.reset()
        llm.eval(row)
        z = np.array(llm.scores[: len(row) - 1], dtype=np.float64)
        top = z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
        total -= float((z[np.arange(len(row) - 1), row[1:]] - lse).sum())
        count += len(row) - 1
    llm.close()
    return total / count


def test_q4_0_with_the_matrix_differs_and_is_not_worse_on_held_out_text(
    smollm2_source, matrix, twin, documents, tmp_path
):
    from transformers import AutoTokenizer

    from infbench.gguf_reading import Reader

    path, _ = matrix
    plain, weighted = tmp_path / "q4_0.gguf", tmp_path / "q4_0-imatrix.gguf"
    gguf.quantize(twin, plain, "Q4_0", 2)
    gguf.quantize(twin, weighted, "Q4_0", 2, imatrix=imatrix.weights(path))
    a = {t.name: t for t in Reader(plain).tensors}
    b = {t.name: t for t in Reader(weighted).tensors}
    q_plain, q_weighted = a["blk.10.attn_q.weight"], b["blk.10.attn_q.weight"]
    assert q_plain.tensor_type == q_weighted.tensor_type
    assert not np.array_equal(np.asarray(q_plain.data), np.asarray(q_weighted.data))
    held_out = calibration.chunks(documents[1], AutoTokenizer.from_pretrained(smollm2_source[0] / "hf"), 6, 128, 1)
    assert _nll(weighted, held_out) <= _nll(plain, held_out)
