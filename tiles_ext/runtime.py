"""Binds a Plan to a device and a model's tensors, and calls torch.ops.tiles.decode_step.

One TileRuntime per (model, device). It owns the plan tensor, the scratch arena and the counter state; the
weights are the model's own parameter tensors (no copy), the KV cache is the caller's (a transformers
StaticCache's layer tensors, shared with PyTorch prefill).
"""
from __future__ import annotations

import functools
import importlib

import torch

from tiles_ext import families
from tiles_ext.errors import check_state
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import attn_warps_fit as format_attn_warps_fit
from tiles_ext.planner.plan import Plan


def model_weights(model, shape=None) -> list[torch.Tensor]:
    """The op's `weights` list for a Transformers causal LM of a served family, in plan order
    (planner/weights.py): the model's own parameter tensors, detached, never copied."""
    family = families.family_for(families.model_type_of(model.config))
    return family.weights(model, shape if shape is not None else family.shape(model.config))


def rope_tables(model) -> tuple[torch.Tensor, float]:
    """(inv_freq fp32 [head_dim/2], attention_scaling): the kernel computes cos/sin(pos * inv_freq) * scaling,
    exactly what transformers' rotary embedding does (Llama-3 scaling is already folded into inv_freq)."""
    rot = model.model.rotary_emb
    return rot.inv_freq.detach().to(torch.float32).contiguous(), float(getattr(rot, "attention_scaling", 1.0))


# Flag-in-data hand-offs (csrc/cuda/flag_data.cuh) save ~0.5 us per dependent stage but double the bytes of every
# stage's inputs. Measured on the H200: SmolLM2-135M -11% (53 KB of weights per worker and layer), Llama-3.2-1B +0.6
# to +9.5% (921 KB). The threshold lies between the two measured points.
FLAG_HANDOFF_MAX_LAYER_BYTES_PER_WORKER = 256 * 1024
HANDOFFS = ("auto", "counters", "flags")


@functools.lru_cache(maxsize=1)
def _kernel_constants() -> dict:
    """What the compiled library offers (csrc/tiles_op.cpp): flags = a CUDA kernel that hands off by flag-in-data
    words too (for every shape it runs)."""
    mod = importlib.import_module("tiles_ext._C")
    return {"flags": bool(getattr(mod, "FLAG_HANDOFFS", 0)), "cuda_max_rows": int(getattr(mod, "CUDA_MAX_ROWS", 1))}


def attn_warps_fit(header: dict) -> bool:
    """Whether the kernel's attention warp path takes this plan's shape (planner/format.py attn_warps_fit); the
    launch picks the kernel that runs the plan's attention by the same rule."""
    return format_attn_warps_fit(header["num_heads"], header["num_kv_heads"], header["head_dim"])


def layer_bytes_per_worker(header: dict) -> int:
    """Weight bytes one decoder layer streams per worker (bf16 q, k, v, o, gate, up, down)."""
    h, hd = header["hidden"], header["head_dim"]
    q, kv = header["num_heads"] * hd, header["num_kv_heads"] * hd
    return 2 * (h * (q + 2 * kv) + q * h + 3 * h * header["intermediate"]) // max(1, header["num_workers"])


def choose_handoff(header: dict, device, handoff: str | None = None) -> str:
    """'counters' or 'flags' for a runtime of this plan on `device`. `handoff` (None = 'auto'): 'auto' takes flags on
    CUDA where they measured faster (small layers per worker); 'flags' insists (a CUDA build is needed); 'counters'
    never."""
    want = handoff if handoff is not None else "auto"
    if want not in HANDOFFS:
        raise ValueError(f"handoff {want!r}: expected one of {', '.join(HANDOFFS)}")
    device = torch.device(device)
    if want == "counters":
        return "counters"
    if header.get("weight_dtype", fmt.DType.BF16) == fmt.DType.F8E4M3:
        if want == "flags":
            raise ValueError("handoff 'flags': an FP8 plan runs with counter hand-offs only (the FP8 kernels); "
                             "pass handoff='counters' or leave it to 'auto'")
        return "counters"
    flags = _kernel_constants()["flags"] if device.type == "cuda" else False
    if want == "flags":
        if not flags:
            raise ValueError(f"handoff 'flags' needs the CUDA kernel; {device} runs the CPU reference executor, "
                             "which hands off by counters only" if device.type != "cuda" else
                             "handoff 'flags' needs a CUDA build of tiles_ext._C")
        return "flags"
    small = layer_bytes_per_worker(header) < FLAG_HANDOFF_MAX_LAYER_BYTES_PER_WORKER
    return "flags" if flags and small else "counters"


class TileRuntime:
    def __init__(self, plan: Plan, device, handoff: str | None = None):
        """`handoff`: how tiles hand results to their consumers on CUDA (choose_handoff): 'auto' (the default),
        'counters' or 'flags'. Fixed for the runtime's life: the counters of one would never catch
        up with steps run by the other."""
        self.plan = plan
        self.device = torch.device(device)
        self.header = plan.header_words()
        self.plan_tensor = torch.from_numpy(plan.to_blob()).to(self.device)
        self.handoff = choose_handoff(plan.header, self.device, handoff)
        # A flagged arena is twice the plan's (a few MB): every element carries its epoch; its size tells the op.
        self.scratch = torch.zeros((2 if self.flagged else 1) * plan.header["scratch_bytes"], dtype=torch.uint8,
                                   device=self.device)
        self.state = torch.zeros(plan.header["state_words"], dtype=torch.int32, device=self.device)

    @property
    def max_rows(self) -> int:
        """The rows one launch decodes here (planner/format.py "Rows"): the plan's max_rows on the CPU executor; on
        CUDA what the build's rows kernels take (csrc/cuda/decode_rows.cuh: BF16 plans; an FP8 plan decodes one
        row per launch there)."""
        rows = self.plan.header["max_rows"]
        if self.device.type != "cuda":
            return rows
        if self.plan.header.get("weight_dtype", fmt.DType.BF16) == fmt.DType.F8E4M3:
            return 1
        return min(rows, _kernel_constants()["cuda_max_rows"])

    @property
    def lookup_in_op(self) -> bool:
        """Whether tiles::prompt_lookup runs here: plans of several rows, on the CPU executor or on CUDA (every build
        with the rows kernels has the prompt-lookup kernels beside them: BF16 plans, as max_rows says)."""
        return self.max_rows >= 2

    @property
    def flagged(self) -> bool:
        """The scratch arena has the flagged layout (flag hand-offs): every element with its epoch."""
        return self.handoff == "flags"

    def step(self, weights, k_cache, v_cache, input_ids, position, inv_freq, rope_scale: float, num_steps: int = 1,
             eos_ids=(), order_seed: int = 0, sampler: torch.Tensor | None = None):
        """Decode num_steps tokens. input_ids / position: int64 device tensors of one element (the token and
        its cache index); or input_ids of R <= max_rows elements with num_steps 1 and no sampler: one pass over R
        consecutive positions (a draft to verify), logits [R, vocab] and the argmax per row. sampler: a tiles_ext.sampling.make_sampler tensor (the tokens are then sampled or picked
        from the processed scores, and its seen bitmap gains them), or None (the argmax of the logits).
        Returns (logits fp32 [num_steps, vocab], tokens int64 [num_steps], -1 after a stop)."""
        return torch.ops.tiles.decode_step(
            self.plan_tensor, self.header, weights, k_cache, v_cache, self.scratch, self.state,
            input_ids, position, inv_freq, float(rope_scale), int(num_steps), [int(e) for e in eos_ids],
            int(order_seed), sampler)

    def prompt_lookup(self, weights, k_cache, v_cache, history, length: int, inv_freq, rope_scale: float,
                      draft_tokens: int, budget: int, eos_ids=(), ngram: int = 2):
        """Rounds of greedy prompt lookup in one launch (planner/format.py "Prompt lookup"): history (int64, on the
        device) holds the sequence's `length` ids so far and gains the accepted ones; the cache holds positions
        0 .. length - 2. Returns (tokens int64 [budget], -1 after the last accepted; rounds int64 [1])."""
        return torch.ops.tiles.prompt_lookup(
            self.plan_tensor, self.header, weights, k_cache, v_cache, self.scratch, self.state, history, int(length),
            inv_freq, float(rope_scale), int(draft_tokens), int(ngram), int(budget), [int(e) for e in eos_ids])

    def check_error(self) -> None:
        """Raise TileKernelError if a launch recorded an error in the state (host sync: call where the caller
        syncs anyway). The message names the error, the worker and the tile."""
        check_state(self.state, self.plan)
