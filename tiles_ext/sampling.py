"""Sampling settings and the op's sampler tensor (planner/format.py, "Sampling", is the recipe both executors run).

`make_sampler` builds the int32 tensor that torch.ops.tiles.decode_step and torch.ops.tiles.sample_logits take:
the settings (validated here, by name, before anything runs), the Philox seed, and the seen bitmap (the prompt's
ids; the executors add each token they pick). One tensor per generate call: the bitmap carries over from launch to
launch, and nothing about the settings is compiled or captured in a CUDA graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import SampleMode


@dataclass(frozen=True)
class SamplerSettings:
    """What Transformers' RepetitionPenalty, MinNewTokensLength, Temperature, TopK, TopP and MinP processors (and
    `_sample`'s draw) do, as the executors take it. Off values: temperature 1, top_k 0, top_p 1, min_p 0,
    repetition_penalty 1, no suppressed ids."""
    mode: SampleMode = SampleMode.SAMPLE
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    suppress_until: int = 0      # absolute token positions below it see suppress_ids at -inf (min_new_tokens)
    suppress_ids: tuple = ()

    def problem(self, vocab: int | None = None) -> str | None:
        """Why these settings cannot run (the setting named, with what it must be), or None."""
        if self.mode not in (SampleMode.GREEDY, SampleMode.SAMPLE):
            return f"mode {self.mode!r} is not a SampleMode"
        t = self.temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            return (f"temperature={t!r}: it must be a finite number > 0 when sampling (for greedy decoding pass "
                    "do_sample=False)")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            return f"top_p={self.top_p!r}: it must be in (0, 1] (1 turns top-p filtering off)"
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0):
            return f"top_k={self.top_k!r}: it must be an integer >= 0 (0 turns top-k filtering off)"
        if not (isinstance(self.min_p, (int, float)) and 0 <= self.min_p <= 1):
            return f"min_p={self.min_p!r}: it must be in [0, 1] (0 turns min-p filtering off)"
        rp = self.repetition_penalty
        if not (isinstance(rp, (int, float)) and math.isfinite(rp) and rp > 0):
            return f"repetition_penalty={rp!r}: it must be a finite number > 0 (1 turns it off)"
        if not (isinstance(self.suppress_until, int) and self.suppress_until >= 0):
            return f"suppress_until={self.suppress_until!r}: it must be an integer >= 0"
        if len(self.suppress_ids) > fmt.MAX_EOS:
            return f"{len(self.suppress_ids)} suppressed EOS ids: at most {fmt.MAX_EOS}"
        if vocab is not None and any(not 0 <= int(i) < vocab for i in self.suppress_ids):
            return f"suppressed EOS ids {list(self.suppress_ids)} reach outside the vocabulary [0, {vocab})"
        return None

    def validate(self, vocab: int | None = None) -> "SamplerSettings":
        problem = self.problem(vocab)
        if problem is not None:
            raise ValueError(f"tiles_ext sampling: {problem}")
        return self

    def kernel_serves(self) -> bool:
        """Whether the CUDA kernel's candidate path takes these settings (GREEDY mode, or 1 <= top_k <= CAND_CAP in
        SAMPLE mode); the CPU reference executor takes every valid setting."""
        return self.mode == SampleMode.GREEDY or 1 <= self.top_k <= fmt.CAND_CAP

    def header_words(self, seed: int) -> list[int]:
        """The SAMPLER_HEADER_WORDS header words for a 64-bit seed."""
        lay = fmt.SAMPLER
        w = [0] * fmt.SAMPLER_HEADER_WORDS
        seed &= (1 << 64) - 1
        ids = [int(i) for i in self.suppress_ids]
        values = dict(
            mode=int(self.mode), top_k=int(self.top_k), eos_suppress_until=int(self.suppress_until),
            seed_lo=_i32(seed & 0xFFFFFFFF), seed_hi=_i32(seed >> 32),
            temperature_bits=fmt.float_bits(float(self.temperature)),
            # Transformers compares the cumulative probabilities with 1 - top_p computed in double, in fp32.
            top_p_cut_bits=fmt.float_bits(1.0 - float(self.top_p)) if self.top_p < 1 else 0,
            min_p_bits=fmt.float_bits(float(self.min_p)),
            penalty_bits=fmt.float_bits(float(self.repetition_penalty)),
            num_suppress=len(ids))
        for name, v in values.items():
            w[lay.index(name)] = v
        base = lay.index("suppress_ids")
        w[base:base + len(ids)] = ids
        return w


def _i32(u: int) -> int:
    return u - (1 << 32) if u >= 1 << 31 else u


def draw_seed(generator: torch.Generator | None = None) -> int:
    """A 64-bit Philox key from torch's default CPU generator (or `generator`): one draw per generate call, so
    torch.manual_seed(s) repeats the call's tokens, on CPU and CUDA alike."""
    words = torch.randint(0, 1 << 32, (2,), dtype=torch.int64, generator=generator).tolist()
    return int(words[0]) | (int(words[1]) << 32)


def seen_bitmap(vocab: int, ids) -> np.ndarray:
    """The seen bitmap (int32 words) of `ids` (any int iterable or tensor): bit (id & 31) of word (id >> 5)."""
    words = np.zeros(fmt.seen_words(vocab), dtype=np.uint32)
    ids = np.unique(np.asarray(torch.as_tensor(ids).reshape(-1).cpu(), dtype=np.int64))
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"tiles_ext sampling: token ids {ids[(ids < 0) | (ids >= vocab)][:8].tolist()} are outside "
                         f"the vocabulary [0, {vocab})")
    np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
    return words.view(np.int32)


def make_sampler(vocab: int, lm_tiles: int, settings: SamplerSettings, seed: int, seen_ids=(),
                 device="cpu") -> torch.Tensor:
    """The sampler tensor for a plan of this vocab and lm_tiles (Plan.header): the settings (validated), the seed,
    and the seen bitmap of `seen_ids` (the prompt: the repetition penalty's ids before any token is generated)."""
    settings.validate(vocab)
    words = np.zeros(fmt.sampler_words(vocab, lm_tiles), dtype=np.int32)
    words[:fmt.SAMPLER_HEADER_WORDS] = settings.header_words(seed)
    off = fmt.sampler_seen_offset(lm_tiles)
    words[off:] = seen_bitmap(vocab, seen_ids)
    return torch.from_numpy(words).to(device)


def plan_sampler(plan, settings: SamplerSettings, seed: int, seen_ids=(), device="cpu") -> torch.Tensor:
    """make_sampler for a Plan (tiles_ext.planner.plan.Plan)."""
    return make_sampler(plan.header["vocab"], plan.header["lm_tiles"], settings, seed, seen_ids, device)


def mark_seen(sampler: torch.Tensor, vocab: int, token: int) -> None:
    """Sets token's bit in the sampler's seen bitmap, in place on its device (the executors do this for every
    token they pick; the host does it for a token picked outside a launch)."""
    lm_tiles = (sampler.numel() - fmt.SAMPLER_HEADER_WORDS - fmt.seen_words(vocab)) // fmt.CAND_SLOT_WORDS
    word = fmt.sampler_seen_offset(lm_tiles) + (int(token) >> 5)
    sampler[word] |= _i32(1 << (int(token) & 31))


def seen_ids(sampler: torch.Tensor, vocab: int) -> list[int]:
    """The ids whose seen bit is set (a host read)."""
    lm_tiles = (sampler.numel() - fmt.SAMPLER_HEADER_WORDS - fmt.seen_words(vocab)) // fmt.CAND_SLOT_WORDS
    words = sampler[fmt.sampler_seen_offset(lm_tiles):].cpu().numpy().view(np.uint32)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab]
    return np.nonzero(bits)[0].tolist()


def bad_logits_message(token: int, position: int) -> str:
    """The BAD_LOGITS report (planner/format.py's texts) for a score row checked on the host."""
    code = fmt.ErrorCode.BAD_LOGITS
    return (f"{code.name} ({fmt.ERROR_TEXTS[code]}): "
            f"{fmt.ERROR_DETAILS[code].format(seen=int(token), wanted=int(position))}")


def check_scores(scores: torch.Tensor, position: int) -> None:
    """Raise RuntimeError (BAD_LOGITS) where the scores the token at `position` is picked from hold NaN or +inf, or
    nothing above -inf: the executors' rule, for a pick made on the host."""
    bad = torch.isnan(scores) | torch.isposinf(scores)
    if bool(bad.any()):
        raise RuntimeError(bad_logits_message(int(bad.reshape(-1).nonzero()[0]), position))
    if not bool((scores > -math.inf).any()):
        raise RuntimeError(bad_logits_message(-1, position))
