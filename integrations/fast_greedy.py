"""Multi-token greedy decoding: up to 64 tokens per launch of the op, argmax and EOS checks inside the kernel.

Used as generate()'s decoding loop (generate's `custom_generate` callable hook, so all of generate's input
preparation, cache creation and length bookkeeping stay Transformers' own) when the call is greedy with no
logits processor and only max-length / EOS stopping. The prefill is generate's own (`_prefill`, PyTorch); the
first token is the argmax of its logits, exactly as `_sample` takes it; every later token comes from the op,
which computes each step exactly as the per-token path does, so both paths return the same tokens. Anything the
loop cannot reproduce exactly is handed to Transformers' `_sample` (which still decodes through the op, one token
per step).
"""
from __future__ import annotations

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from tiles_ext.planner import format as fmt
from tiles_ext.integrations import cache as kv


class FastGreedy:
    """A generate() decoding method (same signature as GenerationMixin._sample)."""

    def __init__(self, state, streamer=None):
        self.state = state
        self.streamer = streamer  # generate() does not pass the streamer to custom decoding methods

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                 synced_gpus=False, streamer=None, **model_kwargs):
        streamer = streamer if streamer is not None else self.streamer
        plan = self._limits(input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus,
                            model_kwargs)
        if plan is None:  # not reproducible here: Transformers' loop (decode steps still go through the op)
            return type(model)._sample(model, input_ids, logits_processor=logits_processor,
                                       stopping_criteria=stopping_criteria, generation_config=generation_config,
                                       synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
        max_length, eos_ids = plan
        return self._generate(model, input_ids, generation_config, streamer, max_length, eos_ids, model_kwargs)

    def _limits(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus, model_kwargs):
        """(max_length, eos_ids) when this loop returns exactly what _sample would, else None."""
        if synced_gpus or len(logits_processor or ()) or input_ids.shape[0] != 1:
            return None
        if generation_config.do_sample or generation_config.output_attentions \
                or generation_config.output_hidden_states:
            return None
        max_length, eos_ids = None, []
        for criterion in stopping_criteria or ():
            if type(criterion) is MaxLengthCriteria:
                max_length = criterion.max_length if max_length is None else min(max_length, criterion.max_length)
            elif type(criterion) is EosTokenCriteria:
                eos_ids += [int(e) for e in criterion.eos_token_id.reshape(-1).tolist()]
            else:
                return None
        eos_ids = sorted(set(eos_ids))
        if max_length is None or len(eos_ids) > fmt.MAX_EOS or input_ids.shape[1] >= max_length:
            return None
        cache = model_kwargs.get(self.state.cache_field)
        if cache is None or self.state.decoder.cache_problem(cache) not in (None, ""):
            return None
        if model_kwargs.get("inputs_embeds") is not None:
            return None
        if kv.is_initialized(cache) and kv.host_length(cache) != 0:
            return None  # generate made this cache, or reset the one it keeps: empty; anything else _sample handles
        return max_length, eos_ids

    def _generate(self, model, input_ids, generation_config, streamer, max_length, eos_ids, model_kwargs):
        decoder = self.state.decoder
        cache = model_kwargs[self.state.cache_field]
        want_scores = generation_config.return_dict_in_generate and generation_config.output_scores
        want_logits = generation_config.return_dict_in_generate and generation_config.output_logits
        keep_rows = want_scores or want_logits

        outputs = model._prefill(input_ids, generation_config, model_kwargs)
        first_logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=input_ids.device)
        del outputs
        token = torch.argmax(first_logits, dim=-1)  # [1], as _sample picks it
        pieces, rows = [token], [first_logits] if keep_rows else []
        token_id = int(token)
        self._stream(streamer, [token_id], input_ids.device)
        length = input_ids.shape[1] + 1          # sequence length so far
        cached = kv.host_length(cache)           # = prompt length (the cache was empty before prefill)
        eos = set(eos_ids)
        while token_id not in eos and length < max_length:
            steps = min(fmt.MAX_STEPS, max_length - length)
            if cached + steps > kv.capacity(cache):
                kv.check_room(cache, steps)      # raises CacheFullError naming the sizes
            logits, tokens = decoder.launch(pieces[-1][-1:], cache, steps, eos_ids)
            host = tokens.tolist()               # the one sync per launch
            done = next((i for i, t in enumerate(host) if t < 0), steps)
            if done == 0:
                decoder.check_error()
                raise RuntimeError("tiles::decode_step executed no step and reported no error")
            kv.advance(cache, done)
            cached += done
            kv.record_length(cache, cached)
            pieces.append(tokens[:done])
            if keep_rows:
                rows += list(logits[:done].unsqueeze(1).unbind(0))
            self._stream(streamer, host[:done], input_ids.device)
            length += done
            token_id = host[done - 1]
        # Kernel errors of the last launches are checked by the patched generate() once this returns.
        sequences = torch.cat([input_ids, torch.cat(pieces).view(1, -1).to(input_ids.dtype)], dim=-1)
        if streamer is not None:
            streamer.end()
        if not generation_config.return_dict_in_generate:
            return sequences
        from transformers.generation.utils import GenerateDecoderOnlyOutput
        return GenerateDecoderOnlyOutput(
            sequences=sequences,
            scores=tuple(rows) if want_scores else None,
            logits=tuple(rows) if want_logits else None,
            attentions=None, hidden_states=None, **{self.state.cache_field: cache})

    @staticmethod
    def _stream(streamer, token_ids, device):
        # One put per token, as _sample does, so any BaseStreamer sees the same sequence of calls.
        if streamer is not None:
            for t in token_ids:
                streamer.put(torch.tensor([t], dtype=torch.long))
