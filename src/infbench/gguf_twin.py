"""The F16 GGUF twin of a source, for the llama.cpp-based stages.

From a GGUF origin: every tensor is dequantized with ``gguf``, rounded to
BF16 exactly as the safetensors checkpoint was, and written as F16 (matrices)
or F32 (vectors), with every metadata key kept. BF16 values convert to F16
exactly except magnitudes below F16's normal range (about 6e-5), which become
subnormals. From a transformers checkpoint: llama.cpp's own
``convert_hf_to_gguf.py`` (config ``llama_cpp.convert_hf_to_gguf``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infbench import atomic
from infbench.errors import ConfigError

_SKIP_KEYS = {"general.architecture", "general.file_type"}
_MOSTLY_F16 = 1


def _round_bf16(array):
    import numpy as np
    import torch

    return torch.from_numpy(np.array(array, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def twin_from_gguf(src: str | Path, out: str | Path) -> None:
    import gguf
    import numpy as np

    from infbench import gguf_reading

    reader = gguf_reading.Reader(src)
    arch = reader.fields["general.architecture"].contents()
    with atomic.atomic_path(out) as tmp:
        writer = gguf.GGUFWriter(tmp, arch)
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key in _SKIP_KEYS:
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        writer.add_file_type(_MOSTLY_F16)
        for tensor in reader.tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            values = _round_bf16(values)
            dtype = np.float16 if values.ndim >= 2 else np.float32
            writer.add_tensor(tensor.name, values.astype(dtype))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def twin_from_checkpoint(checkpoint: str | Path, out: str | Path, convert_script: str | None) -> None:
    if not convert_script:
        raise ConfigError(
            "llama_cpp.convert_hf_to_gguf",
            "the source is a transformers checkpoint; set this key to llama.cpp's "
            "convert_hf_to_gguf.py to build its F16 GGUF twin",
        )
    with atomic.atomic_path(out) as tmp:
        subprocess.run(
            [sys.executable, convert_script, str(checkpoint), "--outtype", "f16", "--outfile", str(tmp)],
            check=True,
        )


def build_twin(origin_gguf: str | None, checkpoint: str | Path, out: str | Path, convert_script: str | None) -> None:
    if origin_gguf:
        twin_from_gguf(origin_gguf, out)
    else:
        twin_from_checkpoint(checkpoint, out, convert_script)
