"""What is decoded: model shapes, prompts, and the memory-bandwidth floor of each workload."""
from __future__ import annotations

import json
import dataclasses
from dataclasses import asdict, dataclass

import torch

from tiles_ext import families
from tiles_ext.planner.shape import ModelShape, UnsupportedConfig

# The shipped configs the benchmark knows (configs/<key>-config.json), with their table labels. The README run takes
# the first two; --zoo takes ZOO (the shapes users run, one per served family and size).
MODEL_LABELS = {"llama-3.2-1b": "Llama-3.2-1B", "smollm2-135m": "SmolLM2-135M", "llama-3.2-3b": "Llama-3.2-3B",
                "llama-3.1-8b": "Llama-3.1-8B", "qwen2.5-0.5b": "Qwen2.5-0.5B", "qwen2.5-7b": "Qwen2.5-7B",
                "qwen3-0.6b": "Qwen3-0.6B", "qwen3-8b": "Qwen3-8B", "mistral-7b-v0.3": "Mistral-7B-v0.3",
                "phi-3-mini-4k": "Phi-3-mini-4k"}
CONFIG_FILES = {m: f"{m}-config.json" for m in MODEL_LABELS}
ZOO = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b", "qwen3-8b",
       "mistral-7b-v0.3", "phi-3-mini-4k")

# A fixed English text for prompts of the real model (repeated to length): deterministic and tokenizer-agnostic.
PROMPT_TEXT = ("The history of the printing press begins in the fifteenth century, when movable metal type made "
               "books cheap enough for ordinary readers. Within fifty years presses worked in hundreds of towns, "
               "and the ideas they carried changed science, religion and politics across Europe. ")


@dataclass(frozen=True)
class Workload:
    model: str          # key of CONFIG_FILES
    prompt_len: int
    new_tokens: int
    weights: str = "random"   # "random" (BF16 from the config) or "real" (the embedded trained SmolLM2)

    @property
    def name(self) -> str:
        return f"{self.model}/p{self.prompt_len}"

    @property
    def label(self) -> str:
        return f"{MODEL_LABELS[self.model]}, prompt {self.prompt_len}"

    def to_dict(self) -> dict:
        return {**asdict(self), "name": self.name, "label": self.label}


def config_dict(model: str) -> dict:
    """The model's shipped config.json as a dict."""
    if model not in CONFIG_FILES:
        raise ValueError(f"unknown benchmark model {model!r}; known: {', '.join(CONFIG_FILES)}")
    from ..models import config_path
    with open(config_path(model)) as f:
        return json.load(f)


def shape_of(model: str, weight_format: str = "bf16") -> ModelShape:
    return dataclasses.replace(families.shape_of(config_dict(model)), weight_format=weight_format)


def kv_bytes_per_position(shape: ModelShape) -> int:
    """BF16 K and V of one cached position, all layers."""
    return shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim * 2


def bytes_per_token(shape: ModelShape, context: float) -> float:
    """Bytes one decode step must read from memory: every weight once plus the K/V of `context` positions."""
    return shape.weight_bytes() + kv_bytes_per_position(shape) * context


def mean_decode_context(w: Workload) -> float:
    """Mean number of cached positions attended by the decode steps of a generation (the first new token comes
    from prefill; step i attends prompt_len + i positions, i = 1..new_tokens-1)."""
    steps = max(1, w.new_tokens - 1)
    return w.prompt_len + (steps + 1) / 2


def floor_ms(shape: ModelShape, context: float, bandwidth_bytes_per_s: float) -> float:
    return bytes_per_token(shape, context) / bandwidth_bytes_per_s * 1e3


def floor_info(w: Workload, bandwidth_bytes_per_s: float, weight_format: str = "bf16") -> dict:
    """The workload's bytes and floor with its weights in `weight_format` (BF16; "fp8" for the FP8 rows)."""
    shape = shape_of(w.model, weight_format)
    ctx = mean_decode_context(w)
    return {"weight_bytes": shape.weight_bytes(), "kv_bytes_per_token": kv_bytes_per_position(shape) * ctx,
            "bytes_per_token": bytes_per_token(shape, ctx), "mean_context": ctx,
            "floor_ms": floor_ms(shape, ctx, bandwidth_bytes_per_s)}


def build_model(model: str, device: torch.device, weights: str = "random", seed: int = 0):
    """(model, tokenizer or None, weights actually used). weights="real" loads the embedded trained SmolLM2
    (tiles_ext.models); "auto" tries that and falls back to random weights of the same shape."""
    from .. import models
    if model not in CONFIG_FILES:
        raise ValueError(f"unknown benchmark model {model!r}; known: {', '.join(CONFIG_FILES)}")
    if weights in ("real", "auto") and model == "smollm2-135m":
        try:
            m, tok = models.load_default_model(device=device, dtype=torch.bfloat16)
            return m.eval(), tok, "real"
        except Exception as e:  # `gguf` is missing on the GPU machine, or the package is absent
            if weights == "real":
                raise
            print(f"[bench] real SmolLM2 weights unavailable ({type(e).__name__}: {e}); using random weights",
                  flush=True)
    elif weights == "real":
        raise ValueError(f"real weights are only embedded for smollm2-135m, not {model}")
    return models.random_model(model, device=device, dtype=torch.bfloat16, seed=seed), None, "random"


def open_window(model, longest: int) -> str | None:
    """The fix tiles_ext.patch's sliding-window refusal names (the config's sliding_window set to None), applied
    where it changes nothing: every sequence of the run, at most `longest` positions (prompt plus new tokens), fits
    the window. Returns the note the model's rows carry; None where the model was left as it is (no window, a
    window patch accepts, or sequences that outgrow it: then the refusal stands and its row says why)."""
    config = model.config
    family = families.family_for(families.model_type_of(config))
    window = family.sliding_window(config)
    if window is None or longest > window:
        return None
    try:
        family.check_window(config)
        return None
    except UnsupportedConfig:
        pass
    config.sliding_window = None
    try:
        family.check_window(config)
    except UnsupportedConfig:  # a window that this setting does not turn off: leave the model as it was
        config.sliding_window = window
        return None
    return (f"sliding_window {window} set to None before patching, the fix the refusal names: no sequence here "
            f"exceeds {longest} positions, so the window changes nothing")


def sequence_positions(w: Workload) -> int:
    """The cache positions a workload's sequence takes: its prompt, its new tokens and one spare (the op rows' cache)."""
    return w.prompt_len + w.new_tokens + 1


def open_window_for(model, workloads: list[Workload]) -> tuple[str | None, dict[str, str]]:
    """open_window where some workload fits the window: (the note of the rows of the workloads that fit,
    {workload name: why its patched rows are skipped} for those that outgrow it, which patch would refuse)."""
    window = families.family_for(families.model_type_of(model.config)).sliding_window(model.config)
    fit = [sequence_positions(w) for w in workloads if window is None or sequence_positions(w) <= window]
    note = open_window(model, max(fit)) if fit else None
    if note is None:
        return None, {}
    return note, {w.name: (f"its sequence ({sequence_positions(w)} positions) outgrows the sliding window of "
                           f"{window}, where tiles_ext.patch refuses the model (the op attends to every position)")
                  for w in workloads if sequence_positions(w) > window}


def make_prompt(w: Workload, vocab: int, tokenizer, device: torch.device, seed: int = 0) -> torch.Tensor:
    """input_ids [1, prompt_len]: the real tokenizer's tokens of PROMPT_TEXT (repeated) for a real model,
    seeded random ids (avoiding the first 16, where special tokens live) otherwise."""
    if tokenizer is not None:
        ids = tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
        reps = -(-w.prompt_len // max(1, len(ids)))
        ids = (ids * reps)[: w.prompt_len]
        return torch.tensor([ids], dtype=torch.long, device=device)
    g = torch.Generator().manual_seed(seed + w.prompt_len)
    return torch.randint(16, vocab, (1, w.prompt_len), generator=g).to(device)
