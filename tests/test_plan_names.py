"""One source of truth for tile names and error texts: the C++ op's names and messages (csrc/plan_names.cpp,
through the CPU ops tiles::describe_tiles / tiles::describe_error) equal the Python rules
(tiles_ext.planner.plan.describe_tile, tiles_ext.errors.describe_error) over every tile of several plans and every
error code, and no hand-written copy of a generated name or text appears in csrc/ or tiles_ext/."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

import tiles_ext  # noqa: F401  (registers torch.ops.tiles)
from parity_helpers import tiny_config
from tiles_ext.errors import describe_error
from tiles_ext.planner import build_plan
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import TILE, ErrorCode, Op, StateWord
from tiles_ext.planner.shape import ModelShape

ROOT = Path(__file__).resolve().parent.parent
TF = {f: i for i, (f, _) in enumerate(TILE.fields)}


def config_file(name):
    return json.loads((ROOT / "configs" / name).read_text())


def shape(**kw):
    base = dict(num_layers=2, hidden=256, num_heads=8, num_kv_heads=2, head_dim=64, intermediate=512, vocab=320,
                eps=1e-6, tied_lm_head=False, rope_type="default", rope_theta=10000.0)
    return ModelShape(**dict(base, **kw))


PLANS = {
    "llama-3.2-1b": lambda: build_plan(config_file("llama-3.2-1b-config.json"), workers=132),
    "smollm2-135m": lambda: build_plan(config_file("smollm2-135m-config.json"), workers=132),
    "smollm2-waves": lambda: build_plan(config_file("smollm2-135m-config.json"), workers=77, policy="waves"),
    "tiny-gqa3": lambda: build_plan(tiny_config(264, 6, 2, 64, 456, 2, vocab=1000), workers=13),
    "tiny-mha-hd128": lambda: build_plan(tiny_config(256, 2, 2, 128, 304, 1, vocab=500, tied=True), workers=1),
    "tiny-waves": lambda: build_plan(tiny_config(136, 4, 2, 64, 200, 1, vocab=300), workers=3, policy="waves"),
    "qkv-bias": lambda: build_plan(shape(qkv_bias=True), workers=7),
    "qk-norm": lambda: build_plan(shape(qk_norm=True, num_heads=6, head_dim=128), workers=9),
}


@pytest.fixture(scope="module", params=sorted(PLANS))
def plan(request):
    return PLANS[request.param]()


def plan_args(plan, blob=None):
    blob = plan.to_blob() if blob is None else blob
    return torch.from_numpy(blob.copy()), plan.header_words()


def cpp_tile_names(plan, blob=None):
    out = torch.ops.tiles.describe_tiles(*plan_args(plan, blob))
    return bytes(out.numpy()).decode("utf-8").split("\n")


def cpp_error(plan, words):
    state = torch.zeros(plan.header["state_words"], dtype=torch.int32)
    for s in StateWord:
        state[int(s)] = words[s.name.lower()]
    text = bytes(torch.ops.tiles.describe_error(*plan_args(plan), state).numpy()).decode("utf-8")
    return text or None


def test_every_tile_name_matches_python(plan):
    py = [plan.tile_name(i) for i in range(plan.header["num_tiles"])]
    assert cpp_tile_names(plan) == py
    # The names say which weight slot a matvec tile reads (not "qkv[w5]"): every QKV tile is a q, k or v group.
    qkv = [n for n, t in zip(py, plan.tiles) if t[TF["op"]] == Op.QKV]
    assert qkv and all(re.fullmatch(r"L\d+\.[qkv]\[g\d+\] rows \d+:\d+", n) for n in qkv)


CORRUPTIONS = [
    ("op", 0), ("op", 9), ("op", -1), ("weight", -1), ("weight", 10**6), ("row_begin", -70), ("layer", -1),
    ("aux0", -3), ("row_begin", 2**31 - 1),
]


@pytest.mark.parametrize("field,value", CORRUPTIONS, ids=[f"{f}={v}" for f, v in CORRUPTIONS])
def test_corrupt_tile_fields_name_alike(field, value):
    """The rules agree off the valid plans too (an error report names whatever tile the state points at)."""
    plan = PLANS["tiny-gqa3"]()
    blob = plan.to_blob()
    for i in range(plan.header["num_tiles"]):
        blob[plan.header["tiles_offset"] + i * TILE.words + TF[field]] = value
    tiles = blob[plan.header["tiles_offset"]:][: plan.header["num_tiles"] * TILE.words].reshape(-1, TILE.words)
    from tiles_ext.planner.plan import describe_tile
    py = [describe_tile(dict(zip(TF, (int(v) for v in t))), plan.header, plan.weights) for t in tiles]
    assert cpp_tile_names(plan, blob) == py


def test_weight_table_slot_out_of_range_names_by_index():
    plan = PLANS["tiny-gqa3"]()
    blob = plan.to_blob()
    q_tile = next(i for i, t in enumerate(plan.tiles) if t[TF["op"]] == Op.QKV)
    w = int(plan.tiles[q_tile][TF["weight"]])
    blob[plan.header["weights_offset"] + w * fmt.WEIGHT.words] = len(fmt.SLOTS)
    weights = plan.weights.copy()
    weights[w][0] = len(fmt.SLOTS)
    from tiles_ext.planner.plan import describe_tile
    assert cpp_tile_names(plan, blob)[q_tile] == describe_tile(plan.tile(q_tile), plan.header, weights)
    assert f"[w{w}]" in cpp_tile_names(plan, blob)[q_tile]


def error_cases(plan):
    """(label, words): every ErrorCode, a code outside it, each where-case (a tile, the step-boundary wait, no
    tile, a tile index outside the plan) and the flag-wait detail; seen/wanted beyond int32's positive half."""
    n = plan.header["num_tiles"]
    base = {s.name.lower(): 0 for s in StateWord}
    cases = []
    for code in list(ErrorCode) + [7, -2]:
        for tile in (0, n // 2, n - 1, -1, -5, n, n + 40):
            for counter, seen, wanted in ((3, 17, 42), (fmt.FLAG_WAIT_COUNTER, -7, 2**31 - 1), (-1, -2**31, -1)):
                words = dict(base, error=int(code), error_worker=5, error_tile=tile, error_step=2,
                             error_counter=counter, error_seen=seen, error_wanted=wanted)
                cases.append((f"{int(code)}/{tile}/{counter}", words))
    return cases


def test_every_error_message_matches_python(plan):
    for label, words in error_cases(plan):
        assert cpp_error(plan, words) == describe_error(words, plan), label


def test_error_messages_use_the_templates():
    plan = PLANS["tiny-gqa3"]()
    words = {s.name.lower(): 0 for s in StateWord}
    flag = dict(words, error=int(ErrorCode.WAIT_TIMEOUT), error_tile=-1, error_counter=fmt.FLAG_WAIT_COUNTER,
                error_seen=-1, error_wanted=3)
    msg = cpp_error(plan, flag)
    assert fmt.STEP_WAIT_WHERE in msg
    assert fmt.FLAG_WAIT_DETAIL.format(seen_u=2**32 - 1, wanted_u=3) in msg
    assert msg.startswith("tiles decode kernel error WAIT_TIMEOUT (" + fmt.ERROR_TEXTS[ErrorCode.WAIT_TIMEOUT])
    tile = dict(words, error=int(ErrorCode.BAD_TOKEN), error_tile=3, error_seen=1000, error_wanted=1000)
    assert fmt.TILE_WHERE.format(tile=3, tile_name=plan.tile_name(3)) in cpp_error(plan, tile)
    assert cpp_error(plan, words) is None and describe_error(words, plan) is None
    # Without a plan the Python reader names the tile by index only, as the C++ op does for an index outside it.
    assert fmt.UNNAMED_TILE_WHERE.format(tile=3) + "," in describe_error(tile)


def test_names_ops_pass_opcheck():
    plan = PLANS["tiny-waves"]()
    blob, header = plan_args(plan)
    state = torch.zeros(plan.header["state_words"], dtype=torch.int32)
    state[int(StateWord.ERROR)] = int(ErrorCode.CACHE_FULL)
    torch.library.opcheck(torch.ops.tiles.describe_tiles.default, (blob, header))
    torch.library.opcheck(torch.ops.tiles.describe_error.default, (blob, header, state))


# --- no hand-written copies ------------------------------------------------------------------------------------

# Names compared whole: op names (as printed and as enum members), slot names, error code names.
NAMES = ({n for n in fmt.OP_NAMES.values()} | {m.name for m in Op} | set(fmt.SLOTS)
         | {m.name for m in ErrorCode if m != ErrorCode.OK})
# Texts compared by their literal pieces (a template split at its {placeholders}), each long enough to be telling.
TEXTS = (list(fmt.ERROR_TEXTS.values()) + list(fmt.ERROR_DETAILS.values())
         + [fmt.FLAG_WAIT_DETAIL, fmt.ERROR_MESSAGE, fmt.TILE_WHERE, fmt.STEP_WAIT_WHERE, fmt.NO_TILE_WHERE,
            fmt.UNNAMED_TILE_WHERE, fmt.UNKNOWN_ERROR_NAME, fmt.UNKNOWN_ERROR_TEXT, fmt.UNKNOWN_ERROR_DETAIL])
PIECES = sorted({p for t in TEXTS for p in re.split(r"\{\w+\}", t) if len(p.strip()) >= 10})
GENERATED = ROOT / "csrc" / "generated" / "plan_format.h"


def cpp_literals(text: str) -> list[str]:
    """The string literals of a C or C++ source (comments skipped; escapes left as written)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                out.append(text[i + 1:j])
            i = j + 1
        else:
            i += 1
    return out


def python_literals(text: str) -> list[str]:
    """Every str constant of a Python source, f-strings' literal parts included (docstrings too)."""
    return [node.value for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def copies(literals, names) -> list[str]:
    hits = [s for s in literals if s in names]
    hits += [f"{p!r} in {s!r}" for s in literals for p in PIECES if p in s]
    return hits


def product_sources():
    for path in sorted((ROOT / "csrc").rglob("*")):
        if path.suffix in (".cpp", ".h", ".cu", ".cuh") and path != GENERATED:
            yield path, cpp_literals(path.read_text()), NAMES
    for path in sorted((ROOT / "tiles_ext").rglob("*.py")):
        # A family declares its weight slots by their format.SLOTS names: those are keys, not copies. One-letter
        # strings ("k": a plot colour) say nothing in Python; C++ has no such use of them.
        names = {n for n in NAMES if len(n) > 1}
        names = names - set(fmt.SLOTS) if "families" in path.parts else names
        yield path, python_literals(path.read_text()), names


def test_no_hand_written_copy_of_a_generated_name_or_text():
    found = {str(p.relative_to(ROOT)): c for p, lits, names in product_sources() if (c := copies(lits, names))}
    assert not found, f"hand-written copies of planner/format.py's names or texts (use the generated ones): {found}"


def test_the_copy_check_sees_copies():
    assert copies(cpp_literals('x = "qkv"; // "embed"\n/* "attn" */ y = "tile %d";'), NAMES) == ["qkv"]
    old = 'return "WAIT_TIMEOUT (a dependency wait)"; s = c10::str(": a flagged input word carried epoch ", e);'
    assert len(copies(cpp_literals(old), NAMES)) == 1
    assert len(copies(python_literals('f"; token {t} with vocab {v}"\nx = "L{l}." + "merge"'), NAMES)) == 2
    assert copies(python_literals('ERR = "a token id outside the vocabulary"'), NAMES)
