"""Multi-token sampling: up to 64 tokens per launch of the op, the logits processors and the draw inside the kernel.

Used as generate()'s decoding loop beside fast_greedy.FastGreedy (the same hook: generate's `custom_generate`
callable, so generate's input preparation, cache creation, processor construction and length bookkeeping stay
Transformers' own). It serves calls whose processors, as generate built them, are exactly a subset of
RepetitionPenalty, MinLength / MinNewTokensLength (over the same EOS ids), Temperature, TopK, TopP and MinP (types
checked exactly, in Transformers' order), with max-length / EOS stopping: sampling (do_sample=True) and greedy
decoding with a repetition penalty or min_new_tokens (the argmax of the processed scores). The op applies them as planner/format.py ("Sampling")
describes, with the sampler tensor of tiles_ext.sampling: the seen bitmap built from the prompt once per call, the
Philox seed drawn once per call from torch's default generator (torch.manual_seed(s) repeats the tokens; a step's
draw depends only on its position, never on how the launches are cut).

The first token is drawn from the prefill's logits by tiles::sample_logits, with the same sampler and arithmetic as
the kernel's draws (greedy: the argmax of the call's processors on them, as _sample takes it). Seeded sampling is therefore reproducible but not token-for-token Transformers' own
(torch.multinomial draws other random numbers); the distribution is the same (tests/test_fast_sample.py). Greedy
with processors returns exactly what Transformers' greedy returns on the op's logits.

output_scores are recomputed from the raw logits with the call's own processors (exactly what Transformers
returns); output_logits are the raw logits. Anything else runs Transformers' `_sample` (decode steps still through
the op, one token per step, Transformers' processors on the op's logits).
"""
from __future__ import annotations

import importlib

import torch
from transformers.generation.logits_process import (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor,
                                                    MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from tiles_ext import sampling
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.fast_greedy import FastGreedy
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import SampleMode

# The processors the op applies, in the order Transformers' _get_logits_processor appends them. generate turns
# min_new_tokens into a MinLengthLogitsProcessor too (min_length = prompt + min_new_tokens): both hold the EOS ids at
# -inf below a position, which is the sampler's one suppression window.
KERNEL_PROCESSORS = (RepetitionPenaltyLogitsProcessor, MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor,
                     TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper)


def device_samples(device: torch.device) -> bool:
    """Whether decode_step takes a sampler on this device (the CPU executor always; CUDA where the build's kernel
    samples: tiles_ext._C.CUDA_SAMPLER)."""
    if device.type != "cuda":
        return True
    return bool(getattr(importlib.import_module("tiles_ext._C"), "CUDA_SAMPLER", 0))


def settings_from(processors, do_sample: bool, prompt_len: int, vocab: int):
    """The SamplerSettings that apply exactly what `processors` (generate's list) apply, or None where the op
    cannot (another processor type or order, or an option the op does not have)."""
    values = dict(mode=SampleMode.SAMPLE if do_sample else SampleMode.GREEDY)
    last = -1
    neg_inf = -float("inf")
    for proc in processors or ():
        kind = type(proc)
        if kind not in KERNEL_PROCESSORS or KERNEL_PROCESSORS.index(kind) <= last:
            return None
        last = KERNEL_PROCESSORS.index(kind)
        if kind is RepetitionPenaltyLogitsProcessor:
            ignore = proc.prompt_ignore_length
            if ignore is not None and bool(torch.as_tensor(ignore).ne(0).any()):
                return None  # padding to skip: generate's mask had zeros (the route refuses those anyway)
            if getattr(proc, "logits_indices", None) is not None:
                return None
            values["repetition_penalty"] = float(proc.penalty)
        elif kind in (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor):
            ids = tuple(sorted({int(i) for i in torch.as_tensor(proc.eos_token_id).reshape(-1).tolist()}))
            if kind is MinLengthLogitsProcessor:
                until = int(proc.min_length)  # input_ids.shape[-1] < min_length: the token's position
            elif proc.prompt_length_to_skip == prompt_len:
                until = prompt_len + int(proc.min_new_tokens)
            else:
                return None
            if len(ids) > fmt.MAX_EOS or any(not 0 <= i < vocab for i in ids) \
                    or values.get("suppress_ids", ids) != ids:
                return None  # two windows over different ids: the sampler has one
            values["suppress_until"] = max(until, values.get("suppress_until", 0))
            values["suppress_ids"] = ids
        elif kind is TemperatureLogitsWarper:
            values["temperature"] = float(proc.temperature)
        else:
            if proc.filter_value != neg_inf or getattr(proc, "min_tokens_to_keep", 1) != 1:
                return None
            if kind is TopKLogitsWarper:
                values["top_k"] = int(proc.top_k)
            elif kind is TopPLogitsWarper:
                values["top_p"] = float(proc.top_p)
            else:
                values["min_p"] = float(proc.min_p)
    if not do_sample and any(k in values for k in ("temperature", "top_k", "top_p", "min_p")):
        return None  # generate adds the warpers only when sampling
    return sampling.SamplerSettings(**values)


def stopping_limits(stopping_criteria):
    """(max_length, eos ids) of max-length / EOS stopping, or None for any other criterion."""
    max_length, eos_ids = None, []
    for criterion in stopping_criteria or ():
        if type(criterion) is MaxLengthCriteria:
            max_length = criterion.max_length if max_length is None else min(max_length, criterion.max_length)
        elif type(criterion) is EosTokenCriteria:
            eos_ids += [int(e) for e in criterion.eos_token_id.reshape(-1).tolist()]
        else:
            return None
    return max_length, sorted(set(eos_ids))


class FastSample:
    """A generate() decoding method (same signature as GenerationMixin._sample). Plain greedy calls (no processors)
    go to FastGreedy; calls this loop cannot reproduce go to Transformers' _sample."""

    def __init__(self, state, streamer=None):
        self.state = state
        self.streamer = streamer  # generate() does not pass the streamer to custom decoding methods

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                 synced_gpus=False, streamer=None, **model_kwargs):
        streamer = streamer if streamer is not None else self.streamer
        if not len(logits_processor or ()) and not generation_config.do_sample:
            return FastGreedy(self.state, streamer)(model, input_ids, logits_processor, stopping_criteria,
                                                    generation_config, synced_gpus, streamer, **model_kwargs)
        plan = self._limits(input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus,
                            model_kwargs)
        if plan is None:  # not reproducible here: Transformers' loop (decode steps still go through the op)
            return type(model)._sample(model, input_ids, logits_processor=logits_processor,
                                       stopping_criteria=stopping_criteria, generation_config=generation_config,
                                       synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
        max_length, eos_ids, settings = plan
        return self._generate(model, input_ids, logits_processor, generation_config, streamer, max_length, eos_ids,
                              settings, model_kwargs)

    def _limits(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus, model_kwargs):
        """(max_length, eos_ids, settings) when this loop serves the call, else None. Settings the op refuses
        (tiles_ext.sampling.SamplerSettings.problem) raise ValueError here, before anything runs."""
        decoder = self.state.decoder
        if synced_gpus or input_ids.shape[0] != 1 or not device_samples(decoder.device):
            return None
        if generation_config.output_attentions or generation_config.output_hidden_states:
            return None
        settings = settings_from(logits_processor, bool(generation_config.do_sample), input_ids.shape[1],
                                 decoder.vocab)
        if settings is None:
            return None
        settings.validate(decoder.vocab)
        limits = stopping_limits(stopping_criteria)
        if limits is None:
            return None
        max_length, eos_ids = limits
        if max_length is None or len(eos_ids) > fmt.MAX_EOS or input_ids.shape[1] >= max_length:
            return None
        cache = model_kwargs.get(self.state.cache_field)
        if cache is None or decoder.cache_problem(cache) not in (None, ""):
            return None
        if model_kwargs.get("inputs_embeds") is not None:
            return None
        if kv.is_initialized(cache) and kv.host_length(cache) != 0:
            return None  # generate made this cache, or reset the one it keeps: empty; anything else _sample handles
        if decoder.device.type == "cuda" and not settings.kernel_serves():
            return None  # top_k 0 or above CAND_CAP: the kernel's candidates cannot hold the kept set
        return max_length, eos_ids, settings

    def _generate(self, model, input_ids, logits_processor, generation_config, streamer, max_length, eos_ids,
                  settings, model_kwargs):
        decoder = self.state.decoder
        cache = model_kwargs[self.state.cache_field]
        want_scores = generation_config.return_dict_in_generate and generation_config.output_scores
        want_logits = generation_config.return_dict_in_generate and generation_config.output_logits
        keep_rows = want_scores or want_logits
        prompt_len = input_ids.shape[1]
        sampler = sampling.plan_sampler(decoder.plan, settings, sampling.draw_seed(), input_ids[0],
                                        decoder.device)

        outputs = model._prefill(input_ids, generation_config, model_kwargs)
        first_logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=input_ids.device)
        del outputs
        # The first new token sits at position prompt_len; the op's step from cache index p draws position p + 1.
        if settings.mode == SampleMode.SAMPLE:
            _, token = torch.ops.tiles.sample_logits(first_logits.to(decoder.device), sampler, prompt_len)
        else:  # as _sample picks it: the argmax of Transformers' own processed scores
            scores = logits_processor(input_ids, first_logits)
            sampling.check_scores(scores, prompt_len)
            token = torch.argmax(scores, dim=-1)
        token_id = int(token)
        sampling.mark_seen(sampler, decoder.vocab, token_id)
        pieces, rows = [token.view(1).to(input_ids.device)], [first_logits] if keep_rows else []
        self._stream(streamer, [token_id])
        length = prompt_len + 1                 # sequence length so far
        cached = kv.host_length(cache)          # = prompt length (the cache was empty before prefill)
        eos = set(eos_ids)
        while token_id not in eos and length < max_length:
            steps = min(fmt.MAX_STEPS, max_length - length)
            if cached + steps > kv.capacity(cache):
                kv.check_room(cache, steps)     # raises CacheFullError naming the sizes
            logits, tokens = self._launch(decoder, pieces[-1][-1:], cache, steps, eos_ids, sampler)
            host = tokens.tolist()              # the one sync per launch
            done = next((i for i, t in enumerate(host) if t < 0), steps)
            if decoder.device.type == "cuda":
                decoder.check_error()  # a CUDA launch cannot raise (BAD_LOGITS, SAMPLER_OVERFLOW name the step)
            if done == 0 or (done < steps and host[done - 1] not in eos):
                decoder.check_error()
                raise RuntimeError(f"tiles::decode_step executed {done} of {steps} steps, reported no error and "
                                   "produced no EOS id")
            kv.advance(cache, done)
            cached += done
            kv.record_length(cache, cached)
            pieces.append(tokens[:done].to(input_ids.device))
            if keep_rows:
                rows += list(logits[:done].to(input_ids.device).unsqueeze(1).unbind(0))
            self._stream(streamer, host[:done])
            length += done
            token_id = host[done - 1]
        sequences = torch.cat([input_ids, torch.cat(pieces).view(1, -1).to(input_ids.dtype)], dim=-1)
        if streamer is not None:
            streamer.end()
        if not generation_config.return_dict_in_generate:
            return sequences
        scores = None
        if want_scores:
            # Transformers' own processors on the same raw logits and the same ids: exactly the scores _sample keeps.
            scores = tuple(logits_processor(sequences[:, :prompt_len + j], row) for j, row in enumerate(rows))
        from transformers.generation.utils import GenerateDecoderOnlyOutput
        return GenerateDecoderOnlyOutput(
            sequences=sequences, scores=scores, logits=tuple(rows) if want_logits else None,
            attentions=None, hidden_states=None, **{self.state.cache_field: cache})

    @staticmethod
    def _launch(decoder, input_ids, cache, steps, eos_ids, sampler):
        """decoder.launch with the sampler: num_steps decode steps from the cache's position."""
        keys, values = kv.layer_tensors(cache)
        return decoder.runtime.step(decoder.weights, keys, values, input_ids.reshape(1), kv.position(cache),
                                    decoder.inv_freq, decoder.rope_scale, steps, eos_ids, 0, sampler)

    @staticmethod
    def _stream(streamer, token_ids):
        # One put per token, as _sample does, so any BaseStreamer sees the same sequence of calls.
        if streamer is not None:
            for t in token_ids:
                streamer.put(torch.tensor([t], dtype=torch.long))
