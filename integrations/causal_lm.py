"""Decoder-only causal LMs of a served family: support checks and the patched forward.

The patched forward sends every decode step (one new token, a StaticCache already holding the prompt) to
torch.ops.tiles.decode_step, the scoring calls of an assisted generate() to its verify passes (assisted.py), and
everything else (prefill, training, batches, extra outputs) to the model's own forward. Its logits are fp32 [1, 1, vocab] (the op's), not rounded to bf16 as the PyTorch forward's are.
"""
from __future__ import annotations

import inspect

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from tiles_ext import families
from tiles_ext.integrations import assisted
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.errors import UnsupportedModelError
from tiles_ext.planner.format import QUANTIZED_SLOTS, SCALE_SLOTS, SLOTS
from tiles_ext.planner.shape import UnsupportedConfig
from tiles_ext.planner.weights import entry_name

SUPPORTED_DTYPE = torch.bfloat16
# The parameter dtypes of a model in an FP8 weight format: E4M3 layers, their fp32 scales, BF16 everything else.
FP8_MODEL_DTYPES = ["bfloat16", "float32", "float8_e4m3fn"]


def family_of(model):
    """The family serving `model`; UnsupportedModelError naming the served model types otherwise."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    try:
        return families.family_for(model_type)
    except UnsupportedConfig:
        raise UnsupportedModelError(
            f"{type(model).__name__} (model_type {model_type!r}) is not supported; supported model types: "
            f"{families.served()}") from None


def check_model(model, weight_format: str = "bf16", runs: str | None = None) -> torch.device:
    """The device the model runs on; raises UnsupportedModelError naming what is unsupported and what is.
    weight_format: the model's (tiles_ext.fp8.model.weight_format_of), which says which dtypes it may hold; runs:
    the format the op will read (patch(weights="fp8") of a BF16 model: "fp8"; default: weight_format), which says
    which devices serve it."""
    device = model_device(model, weight_format)
    if (runs or weight_format) != "bf16" and device.type == "cuda" and device_capability(device) < (8, 9):
        major, minor = device_capability(device)
        raise UnsupportedModelError(FP8_ON_OLD_GPU.format(name=type(model).__name__, device=device, cc=f"{major}.{minor}"))
    return device


def device_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def model_device(model, weight_format: str = "bf16") -> torch.device:
    """The one device of a causal LM whose parameter dtypes fit `weight_format`, on a device this build serves."""
    name = type(model).__name__
    inner = getattr(model, "model", None)
    if getattr(model, "lm_head", None) is None or inner is None or not hasattr(inner, "layers"):
        raise UnsupportedModelError(
            f"{name} is not supported: tiles_ext.patch takes a causal LM with an LM head "
            "(e.g. AutoModelForCausalLM.from_pretrained(...))")
    params = list(model.parameters())
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    # An FP8 model's layers were checked one by one (weight_format_of); the op checks every tensor it reads.
    if not set(dtypes) <= set(FP8_MODEL_DTYPES if weight_format != "bf16" else ["bfloat16"]):
        raise UnsupportedModelError(
            f"{name} has parameters in {', '.join(dtypes)}; only bfloat16 is supported: load it with "
            "dtype=torch.bfloat16 or call model.to(torch.bfloat16)")
    devices = {p.device for p in params}
    if len(devices) != 1:
        raise UnsupportedModelError(
            f"{name} is spread over devices {sorted(map(str, devices))}; only a model on one device is supported "
            "(load it without a multi-device device_map)")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise UnsupportedModelError(f"{name} is on {device}; supported devices: cpu, cuda")
    if device.type == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key("tiles::decode_step", "CUDA"):
        raise UnsupportedModelError(
            f"{name} is on {device}, but this tiles_ext build has no CUDA kernel (built CPU-only); rebuild on a "
            "machine with a CUDA toolkit and CUDA torch, or patch a CPU model")
    if getattr(model, "hf_device_map", None) and len(set(map(str, model.hf_device_map.values()))) > 1:
        raise UnsupportedModelError(f"{name} uses a multi-device device_map; only one device is supported")
    return device


# E4M3 -> f16 conversion instructions (cvt.rn.f16x2.e4m3x2) arrived with compute capability 8.9 (Ada, Hopper).
FP8_ON_OLD_GPU = ("{name} is on {device} (compute capability {cc}) with FP8 weights, but that GPU has no FP8 "
                  "conversion instructions (compute capability 8.9 or newer: H100, H200); patch the BF16 model "
                  "without weights=\"fp8\", or run the FP8 model on the CPU reference executor (model.to('cpu'))")


def entry_dtype(plan, i: int) -> torch.dtype:
    """The dtype of entry i of the op's weights list in the plan's weight format."""
    slot = SLOTS[int(plan.weights[i][0])]
    if slot in SCALE_SLOTS:
        return torch.float32
    if slot in QUANTIZED_SLOTS and plan.shape.weight_format != "bf16":
        return torch.float8_e4m3fn
    return SUPPORTED_DTYPE


PACKED_HINT = "quantized or packed layers are not supported: load dense bf16 weights"
# After patch(), a weight whose shape no longer matches the config was replaced without the config saying so.
REPLACED_HINT = ("a replaced weight keeps the shape the config gives, or the config gives the new one, as "
                 "resize_token_embeddings does")


def check_weights(model, plan, weights, hint: str = PACKED_HINT) -> None:
    """The op reads plain row-major bf16 matrices of the plan's shapes: refuse anything else (packed or quantized
    layers, e.g. GGUF kept packed; after patch(), a replaced module of another shape)."""
    for i, (w, (_, _, rows, cols)) in enumerate(zip(weights, plan.weights.tolist())):
        want = (rows,) if cols == 0 else (rows, cols)
        dtype = entry_dtype(plan, i)
        if tuple(w.shape) != want or w.dtype != dtype or not w.is_contiguous():
            raise UnsupportedModelError(
                f"weight {i} ({entry_name(plan.weights, i)}) of {type(model).__name__} is {w.dtype} "
                f"{tuple(w.shape)}{'' if w.is_contiguous() else ' non-contiguous'}; the plan needs contiguous "
                f"{str(dtype).removeprefix('torch.')} {want} ({hint})")


def make_forward(signature: inspect.Signature):
    """The patched forward: a function to bind to the instance (types.MethodType), which finds the patch state
    through `self`, so that a copy of the model runs on its own state. It shows `signature` (the original forward's)
    to inspect.signature, through which generate() reads which arguments the model takes."""
    def forward(self, *args, **kwargs):
        return patched_forward(self, args, kwargs)

    forward.__signature__ = with_self(signature)
    forward.__doc__ = ("tiles_ext: decode steps run on torch.ops.tiles.decode_step, everything else on the "
                       "model's own forward.")
    return forward


def with_self(signature: inspect.Signature) -> inspect.Signature:
    """A bound method's signature as that of the function behind it (inspect drops the first parameter again)."""
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return signature.replace(parameters=[this, *signature.parameters.values()])


def patched_forward(model, args, kwargs):
    state = model._tiles
    call = dict(zip(state.positional["forward"], args)) if args else {}
    if call:
        call.update(kwargs)
    else:
        call = kwargs
    input_ids = call.get("input_ids")
    cache = call.get("cache")
    if cache is None:
        cache = call.get("past_key_values")
    if assisted.is_verify_call(state, input_ids, cache):
        out = assisted.verify_forward(model, state, call, input_ids, cache)
        if out is not None:
            return out
    if input_ids is None or input_ids.dim() != 2 or input_ids.shape[1] != 1:
        return _delegate(model, state, args, kwargs)  # prefill, inputs_embeds: PyTorch
    if cache is None or call.get("use_cache") is False:
        return _delegate(model, state, args, kwargs)  # no cache: not a decode step
    problem = _decode_problem(state, state.decoder, input_ids, cache, call)
    if problem is not None:
        if problem:
            state.warn_once(problem[0], problem[1])
        return _delegate(model, state, args, kwargs)
    eager = not torch.compiler.is_compiling()
    if eager:
        if not state.trusted:
            state.ensure_current(model)  # generate() checks once per call; a bare forward once per call
        length = kv.check_room(cache, 1)
    logits = state.decoder.step(input_ids if input_ids.dtype == torch.long else input_ids.long(), cache)
    if eager:
        kv.record_length(cache, length + 1)
    out = CausalLMOutputWithPast(logits=logits.view(1, 1, -1), **{state.cache_field: cache})
    return_dict = call.get("return_dict")
    if return_dict is None:
        return_dict = bool(getattr(model.config, "return_dict", True))
    return out if return_dict else out.to_tuple()


def _delegate(model, state, args, kwargs):
    """The model's own forward. The cache goes under the name this Transformers version expects, so that its
    deprecation notice for the old name is never raised on Tiles' behalf."""
    if state.cache_field != "past_key_values" and "past_key_values" in kwargs and state.cache_field not in kwargs:
        kwargs = dict(kwargs)
        kwargs[state.cache_field] = kwargs.pop("past_key_values")
    return state.original(model, "forward")(*args, **kwargs)


def _decode_problem(state, decoder, input_ids, cache, call):
    """None: the op serves this decode step. () : PyTorch serves it, silently (nothing to warn about).
    (key, message): PyTorch serves it, warn once."""
    if call.get("labels") is not None:
        return ("labels", "a forward with labels (loss) asked for")
    for flag in ("output_attentions", "output_hidden_states"):
        if call.get(flag):
            return (flag, f"{flag}=True asked for (the tile op does not produce them)")
    problem = decoder.cache_problem(cache)
    if problem == "":
        return ()  # StaticCache not allocated yet (a 1-token prompt): the PyTorch forward allocates it
    if problem is None and input_ids.shape[0] != 1:
        problem = f"batch size {input_ids.shape[0]} (the tile op decodes batch 1)"
    if problem is not None:
        return ("cache:" + problem.split(" (")[0], f"decode step with {problem}")
    if state.trusted:
        # Inside generate(): the wrapper checked the 2-D mask (all ones) once; generate turns it into the 4-D
        # causal mask of the StaticCache, which is exactly what the op attends to, and positions = cache length.
        return None
    mask = call.get("attention_mask")
    if mask is not None and (mask.dim() != 2 or mask.shape[0] != 1):
        return ("mask-shape", f"a {mask.dim()}-D attention mask {tuple(mask.shape)} (outside generate() the tile "
                              "op takes no mask or an all-ones [1, length] one)")
    # A user's own loop: check what the op assumes. These read device values (a sync on CUDA; under
    # torch.compile a graph break), so they run only when a mask or positions are passed outside generate().
    if mask is not None and not bool((mask == 1).all()):
        return ("mask-zeros", "an attention mask with zeros (padding; the tile op attends to every cached position)")
    pos = call.get("position_ids")
    if pos is not None:
        length = kv.host_length(cache)
        if pos.numel() != 1 or int(pos.reshape(-1)[0]) != length:
            return ("positions", f"position_ids {pos.reshape(-1).tolist()} that differ from the cache length "
                                 f"{length} (the tile op puts the token at the cache's next slot)")
    return None
