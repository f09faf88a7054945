import pytest

from sglang_lite.config import EngineConfig, native_cpu_bf16, parse_size
from sglang_lite.sampling_params import SamplingParams


@pytest.mark.parametrize(
    "params, field",
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 1.5}, "max_new_tokens"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"temperature": -0.1}, "temperature"),
        ({"min_p": 2}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"n": 0}, "n"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"min_new_tokens": 5, "max_new_tokens": 2}, "min_new_tokens"),
        ({"regex": "a", "ebnf": "start: 'a'"}, "ebnf"),
        ({"temprature": 0.5}, "temprature"),
        ({"seed": -3}, "seed"),
        ({"logit_bias": {"abc": 1.0}}, "logit_bias"),
        ({"logit_bias": {"-4": 1.0}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"logit_bias": {5: "x"}}, "logit_bias"),
        ({"logit_bias": [1, 2]}, "logit_bias"),
        ({"logit_bias": {str(i): 1.0 for i in range(1025)}}, "logit_bias"),
    ],
)
def test_bad_values_name_their_field(params, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams.from_dict(params)


def test_defaults_and_normalization():
    p = SamplingParams.from_dict({"stop": "\n", "json_schema": {"type": "object"}})
    assert p.stop == ["\n"]
    assert p.json_schema == '{"type": "object"}'
    assert p.constraint == ("json_schema", '{"type": "object"}')
    assert SamplingParams.from_dict(None).max_new_tokens == 128
    assert SamplingParams.from_dict({"temperature": 0}).greedy
    assert SamplingParams.from_dict({"logit_bias": {"17": -100, 3: 2.5}}).logit_bias == {17: -100, 3: 2.5}


def test_auto_dtype_on_cpu_follows_native_bf16(monkeypatch):
    import sglang_lite.config as config

    for native, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(config, "native_cpu_bf16", lambda native=native: native)
        assert EngineConfig.create(device="cpu").dtype == dtype
        assert EngineConfig.create(device="cpu", dtype="float32").dtype == "float32"


@pytest.mark.parametrize("cpuinfo, native", [
    ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n", True),
    ("flags\t\t: fpu sse2 avx2 amx_tile amx_bf16\n", True),
    ("Features\t: fp asimd bf16 i8mm\n", True),  # Arm
    ("flags\t\t: fpu sse2 avx2 fma avx512f\n", False),  # AVX-512 without its bf16 part
    (None, False),  # no /proc/cpuinfo (not Linux)
])
def test_native_bf16_probe_reads_the_cpu_flags(monkeypatch, cpuinfo, native):
    import sglang_lite.config as config

    class FakePath:  # the real probe (imported before the session patch), on a given cpuinfo
        def __init__(self, path):
            assert path == "/proc/cpuinfo"

        def read_text(self):
            if cpuinfo is None:
                raise FileNotFoundError("/proc/cpuinfo")
            return cpuinfo

    monkeypatch.setattr(config, "Path", FakePath)
    probe = native_cpu_bf16.__wrapped__  # past its cache: the answer for this machine
    assert probe() is native


def test_engine_config_resolves_auto_and_rejects_unknown_options():
    cfg = EngineConfig.create()
    assert cfg.device == "cpu" and cfg.dtype == "float32" and cfg.attention_backend == "torch"
    with pytest.raises(ValueError, match="max_prefil_tokens"):
        EngineConfig.create(max_prefil_tokens=3)
    with pytest.raises(ValueError, match="chunked_prefill_size"):
        EngineConfig.create(chunked_prefill_size=9000, max_prefill_tokens=4096)
    with pytest.raises(ValueError, match="attention_backend"):
        EngineConfig.create(attention_backend="triton")


@pytest.mark.parametrize("text, expected", [("1GiB", 2**30), ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9),
                                            ("64m", 64 * 2**20), (4096, 4096)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected
