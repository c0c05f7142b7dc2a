"""llmkit.devices: one meaning of "auto", and a clear error for a device this machine lacks."""
import pytest
import torch

from llmkit.devices import resolve_device


def test_auto_prefers_a_gpu_and_falls_back_to_the_cpu():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert resolve_device("auto") == torch.device(expected) == resolve_device()


def test_named_devices_pass_through():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_missing_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA GPU; use 'cpu' or 'auto'"):
        resolve_device("cuda:0")


def test_a_device_name_torch_does_not_know_is_refused():
    with pytest.raises(RuntimeError):
        resolve_device("tpu")
