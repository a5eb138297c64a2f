"""Reading the error words the persistent kernel leaves in the `state` tensor (planner/format.py StateWord).

The CUDA op reports an error of one launch at the next call on the same state, without syncing the host in the hot
path. `check_state` reads the words now (a host sync) and raises a RuntimeError naming the error, the worker and
the tile, with the tile's name from the plan when one is given.
"""
from __future__ import annotations

import torch

from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import FLAG_WAIT_COUNTER, ErrorCode, StateWord

_MEANING = {
    ErrorCode.WAIT_TIMEOUT: "a dependency wait exceeded its bound (a plan or kernel bug, never a valid schedule)",
    ErrorCode.CACHE_FULL: "position + step reached the KV cache's capacity",
    ErrorCode.BAD_TOKEN: "a token id outside the vocabulary",
    ErrorCode.BAD_PLAN: "the device plan does not match the header it was launched with",
}


class TileKernelError(RuntimeError):
    """An error recorded by the decode kernel in the state tensor. `words` holds the raw error words."""

    def __init__(self, message: str, words: dict):
        super().__init__(message)
        self.words = words


def error_words(state: torch.Tensor) -> dict:
    """The state's header words by StateWord name (lower case). Host sync."""
    w = state[: fmt.STATE_HEADER_WORDS].cpu().tolist()
    return {s.name.lower(): int(w[int(s)]) for s in StateWord}


def describe_error(words: dict, plan=None) -> str | None:
    """A one-paragraph description of the recorded error, or None when the state holds none."""
    code = words["error"]
    if code == ErrorCode.OK:
        return None
    try:
        name = ErrorCode(code).name
        meaning = _MEANING.get(ErrorCode(code), "")
    except ValueError:
        name, meaning = f"unknown error {code}", ""
    tile = words["error_tile"]
    if tile >= 0:
        tile_txt = f"tile {tile}"
        if plan is not None and tile < plan.header["num_tiles"]:
            tile_txt += f" ({plan.tile_name(tile)})"
    elif code == ErrorCode.WAIT_TIMEOUT:
        tile_txt = "the step-boundary wait for the previous step's token"
    else:
        tile_txt = "no tile (launch-time check)"
    seen, wanted = words["error_seen"] & 0xFFFFFFFF, words["error_wanted"] & 0xFFFFFFFF
    if code == ErrorCode.WAIT_TIMEOUT and words["error_counter"] == FLAG_WAIT_COUNTER:
        detail = f"; a flagged input word carried epoch {seen}, waited for {wanted}"
    elif code == ErrorCode.WAIT_TIMEOUT:
        detail = f"; counter {words['error_counter']} was at {seen}, waited for {wanted}"
    elif code == ErrorCode.CACHE_FULL:
        detail = f"; position {words['error_seen']} with max_cache_len {words['error_wanted']}"
    elif code == ErrorCode.BAD_TOKEN:
        detail = f"; token {words['error_seen']} with vocab {words['error_wanted']}"
    elif code == ErrorCode.BAD_PLAN:
        detail = f"; device word {words['error_seen']}, header says {words['error_wanted']}"
    else:
        detail = ""
    return (f"tiles decode kernel error {name} ({meaning}) in worker {words['error_worker']}, {tile_txt}, "
            f"step {words['error_step']}{detail}. The state keeps the error and later launches on it do nothing: "
            f"make a new runtime/state.")


def check_state(state: torch.Tensor, plan=None) -> None:
    """Raise TileKernelError (a RuntimeError) if the kernel recorded an error in `state`. Host sync.

    `plan`: the Plan the state belongs to (tiles_ext.planner.plan.Plan), to name the failing tile."""
    words = error_words(state)
    msg = describe_error(words, plan)
    if msg is not None:
        raise TileKernelError(msg, words)
