"""The fast GGUF reader gives gguf's own reader's fields and tensors, byte for byte."""

import gguf
import numpy as np
from conftest import EMBEDDED_ORIGIN


def test_the_fast_reader_reads_what_ggufs_reader_reads():
    from infbench import gguf_reading, sources

    path = sources.resolve_gguf("smollm2-135m", sources.SourceOrigin.model_validate(EMBEDDED_ORIGIN))
    fast, stock = gguf_reading.Reader(path), gguf.GGUFReader(path)
    assert list(fast.fields) == list(stock.fields)
    for name, field in stock.fields.items():
        other = fast.fields[name]
        assert (other.types, other.data, other.offset) == (field.types, field.data, field.offset), name
        assert all(a.tobytes() == b.tobytes() and a.dtype == b.dtype for a, b in zip(other.parts, field.parts))
    assert [t.name for t in fast.tensors] == [t.name for t in stock.tensors]
    for a, b in zip(fast.tensors, stock.tensors):
        assert (a.tensor_type, list(a.shape), a.data_offset) == (b.tensor_type, list(b.shape), b.data_offset)
        assert np.array_equal(a.data, b.data)


def test_for_transformers_shares_one_parse_per_file_and_restores_gguf():
    from infbench import gguf_reading, sources

    path = sources.resolve_gguf("smollm2-135m", sources.SourceOrigin.model_validate(EMBEDDED_ORIGIN))
    original = gguf.GGUFReader
    with gguf_reading.for_transformers():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again and isinstance(first, gguf_reading.Reader)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert gguf.GGUFReader is original
