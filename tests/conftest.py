"""Shared fixtures: the embedded model, converted once per machine, and engines on it."""

from __future__ import annotations

import sglang_lite_kernels

sglang_lite_kernels.select_interpreter()  # before anything imports triton: kernels run interpreted on CPU

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang_lite import Engine  # noqa: E402
from sglang_lite.model.loader import embedded_model_dir  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _fp32_on_cpu():
    """Tests compare outputs exactly (engine against engine, against transformers), so the
    CPU path runs fp32 whatever this CPU's bf16 support (``native_cpu_bf16``): results do not
    depend on the machine. Nor do fp32 weights get packed (``packs_in_fp32``: int8 activations
    through the C kernel): a test that wants them asks. Servers started in subprocesses pass
    --dtype float32, which keeps the weights as they are."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sglang_lite.config.native_cpu_bf16", lambda: False)
        mp.setattr("sglang_lite.config.packs_in_fp32", lambda: False)
        yield


@pytest.fixture(scope="session")
def model_dir():
    """The embedded SmolLM2-135M-Instruct as an HF directory (fp32 safetensors + tokenizer)."""
    return embedded_model_dir()


@pytest.fixture(scope="session")
def engine(model_dir):
    """One engine on the embedded model, shared by tests that do not change its options."""
    eng = Engine()
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.tokenizer


def assert_no_leak(eng: Engine) -> None:
    """Every KV page is free once nothing runs and the prefix cache is flushed."""
    assert eng.flush_cache()
    stats = eng.get_stats()
    assert stats["num_running_reqs"] == 0 and stats["num_queue_reqs"] == 0
    assert stats["num_free_pages"] == stats["num_usable_pages"], stats
