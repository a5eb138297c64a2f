"""Greedy prompt lookup inside one CUDA launch (tiles::prompt_lookup on the prompt-lookup kernels, decode_rows.cuh
with TILE_LOOKUP; skipped without CUDA).

Tiny configs of Llama (head_dim 64, GQA 4), Qwen2 (G7, q/k/v biases), Qwen3 (q/k norms, head_dim 128), a
head_dim-96 Qwen3 and a random Llama whose greedy text repeats (rounds accept several tokens), each with the default plan and with three attention partitions of 4-position granules, on counter
and flag runtimes, from a copy-heavy prompt:
  - one launch's tokens are the op's one-row CUDA greedy steps (the rows kernel gives their bits), with every cache
    row from the first pass's position on poisoned (NaN, huge values): rejected drafts' rows are never read; the
    accepted positions' K/V bits are the one-row run's; the history holds the tokens;
  - its rounds are the drafting rule's (tests/test_prompt_lookup_op.py replayed_rounds, Transformers' rule), in one
    launch or in several of smaller budgets; the epoch (and on flags ROWS_PASSES) advanced by one per round;
  - an EOS id ends the launch after it; bad arguments are refused before any launch;
and generate(prompt_lookup_num_tokens=k) on a patched GPU model runs its rounds in the op: plain greedy's tokens, in
as many rounds as Transformers' own loop runs forward calls.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from integration_support import patched_copy  # noqa: E402
from integration_support import tiny_config as llama_tiny  # noqa: E402
from parity_helpers import prefill, tiny_model  # noqa: E402
from test_prompt_lookup_op import PROMPT, replayed_rounds, transformers_rounds  # noqa: E402
from test_rows_cuda import CASES, PLANS, _gpu_plan  # noqa: E402  (the rows kernel's cases and plans)
from tiles_ext.errors import check_state  # noqa: E402
from tiles_ext.integrations import patch_state  # noqa: E402
from tiles_ext.models import random_model  # noqa: E402
from tiles_ext.planner.format import StateWord  # noqa: E402
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables  # noqa: E402

DEV = "cuda"
ROOM, NEW, K = 160, 40, 3


# A random model whose greedy text repeats (its rounds accept several tokens); the others mostly reject.
COPIES = "llama-copies"


@pytest.fixture(scope="module", params=list(CASES) + [COPIES])
def model(request):
    if request.param == COPIES:
        return random_model(llama_tiny(), seed=5)
    return tiny_model(CASES[request.param], seed=4)


class Lookup:
    """A model bound to a plan on a device, a prefill of all prompt ids but the last (the first round's pass runs
    the last one), and the history."""

    def __init__(self, model, plan, device, handoff=None):
        self.rt = TileRuntime(plan, device, handoff)
        self.plan = plan
        self.w = [w.to(device) for w in model_weights(model, plan.shape)]
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(device)
        cache = prefill(model, PROMPT[:, :-1], ROOM)
        self.k = [l.keys.to(device).clone() for l in cache.layers]
        self.v = [l.values.to(device).clone() for l in cache.layers]
        self.length = PROMPT.shape[1]
        self.history = torch.zeros(ROOM + 64, dtype=torch.long, device=device)
        self.history[:self.length] = PROMPT[0].to(device)

    def poison(self, start):
        for t in self.k + self.v:
            t[:, :, start:].fill_(float("nan"))
            t[:, :, start + 5:].fill_(3e38)

    def run(self, budget, eos=()):
        tokens, rounds = self.rt.prompt_lookup(self.w, self.k, self.v, self.history, self.length, self.inv,
                                               self.scale, K, budget, eos)
        host = tokens.cpu().tolist()
        done = next((i for i, t in enumerate(host) if t < 0), len(host))
        self.length += done
        return host[:done], int(rounds.cpu()[0])

    def one_row_greedy(self, steps):
        token, out = self.history[self.length - 1:self.length].clone(), []
        for i in range(steps):
            pos = torch.tensor([self.length - 1 + i], device=token.device)
            _, tokens = self.rt.step(self.w, self.k, self.v, token, pos, self.inv, self.scale, 1, [])
            token = tokens[:1].clone()
            out.append(int(token.cpu()))
        return out

    def kv_bits(self, lo, hi):
        return [x[:, :, lo:hi].cpu().view(torch.int16) for x in self.k + self.v]


@pytest.mark.parametrize("handoff", ["counters", "flags"])
@pytest.mark.parametrize("kind", list(PLANS))
@pytest.mark.parametrize("budgets", [[64], [5, 7, 64]])
def test_one_launch_is_one_row_greedy_in_the_drafting_rules_rounds(model, kind, handoff, budgets):
    plan = _gpu_plan(model, kind)
    ref = Lookup(model, plan, DEV, handoff)
    want = ref.one_row_greedy(NEW + 1)
    op = Lookup(model, plan, DEV, handoff)
    assert op.rt.handoff == handoff and op.rt.lookup_in_op
    op.poison(PROMPT.shape[1] - 1)
    tokens, rounds, launches = [], 0, 0
    for budget in budgets + [64] * NEW:
        if len(tokens) >= NEW:
            break
        got, r = op.run(min(budget, NEW - len(tokens)))
        check_state(op.rt.state, plan)
        assert 1 <= len(got) <= budget and r >= 1
        tokens, rounds, launches = tokens + got, rounds + r, launches + 1
    assert tokens == want[:NEW], (tokens, want)
    assert op.history[:op.length].cpu().tolist() == PROMPT[0].tolist() + want[:NEW]
    assert rounds == replayed_rounds(PROMPT[0].tolist(), want[:NEW], K, 10 ** 6)
    if model.config.hidden_size == llama_tiny().hidden_size:  # COPIES: drafts accepted, several tokens a round
        assert rounds < NEW, rounds
    assert int(op.rt.state[StateWord.EPOCH]) == rounds
    assert int(op.rt.state[StateWord.ROWS_PASSES]) == (rounds if handoff == "flags" else 0)
    end = op.length - 1  # the accepted positions (the last token's K/V is the next pass's)
    assert all(map(torch.equal, op.kv_bits(0, end), ref.kv_bits(0, end)))
    # The state and cache stay consistent after the launches: a one-row step from there is the reference's next.
    assert op.one_row_greedy(1) == want[NEW:]


def test_an_eos_ends_the_launch(model):
    plan = _gpu_plan(model, "default")
    want = Lookup(model, plan, DEV).one_row_greedy(NEW)
    eos = want[20]
    got, _ = Lookup(model, plan, DEV).run(64, [eos])
    assert got == want[:want.index(eos) + 1]


@pytest.mark.parametrize("args, match", [
    (dict(k=8), r"draft_tokens 8 outside 1\.\.7"),
    (dict(budget=65), r"budget 65 outside 1\.\.64"),
    (dict(history=40), r"history holds 40 ids"),
])
def test_bad_arguments_are_refused_before_any_launch(args, match):
    model = tiny_model(CASES["llama-g4-hd64"], seed=4)
    op = Lookup(model, _gpu_plan(model, "default"), DEV)
    history = op.history[:args.get("history", op.history.numel())].clone()
    with pytest.raises(RuntimeError, match=match):
        op.rt.prompt_lookup(op.w, op.k, op.v, history, op.length, op.inv, op.scale, args.get("k", K),
                            args.get("budget", 64))
    torch.cuda.synchronize()
    assert int(op.rt.state[StateWord.EPOCH]) == 0 and int(op.rt.state[StateWord.ERROR]) == 0


@pytest.mark.parametrize("k", [1, 3, 7])
def test_generate_prompt_lookup_on_cuda_runs_transformers_rounds_in_the_op(k):
    model = random_model(llama_tiny(), device=DEV, seed=5)
    main = patched_copy(model)
    prompt = PROMPT.to(DEV)
    kw = dict(max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    plain = main.generate(prompt, **kw)
    got = main.generate(prompt, prompt_lookup_num_tokens=k, **kw)
    state = patch_state(main)
    assert state.lookup_fallback is None
    assert torch.equal(got, plain)
    want, calls = transformers_rounds(patched_copy(model, multi_token=False), prompt, k)
    assert torch.equal(want, got)
    assert state.lookup_rounds == calls
