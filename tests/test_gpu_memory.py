"""gpu_memory without a GPU: NVML unavailable gives None, not an error or a number (test_cuda_likelihood checks
it on a GPU against a known allocation)."""

import pytest
import torch

from infbench import gpu_memory


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: see test_cuda_likelihood")
def test_device_bytes_is_none_where_nvml_is_unavailable():
    assert gpu_memory.device_bytes({1}) is None
