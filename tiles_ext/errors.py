"""Reading the error words the persistent kernel leaves in the `state` tensor (planner/format.py StateWord).

The CUDA op reports an error of one launch at the next call on the same state, without syncing the host in the hot
path. `check_state` reads the words now (a host sync) and raises a RuntimeError naming the error, the worker and
the tile, with the tile's name from the plan when one is given.
"""
from __future__ import annotations

import torch

from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import FLAG_WAIT_COUNTER, ErrorCode, StateWord


class TileKernelError(RuntimeError):
    """An error recorded by the decode kernel in the state tensor. `words` holds the raw error words."""

    def __init__(self, message: str, words: dict):
        super().__init__(message)
        self.words = words


def error_words(state: torch.Tensor) -> dict:
    """The state's header words by StateWord name (lower case). Host sync."""
    w = state[: fmt.STATE_HEADER_WORDS].cpu().tolist()
    return {s.name.lower(): int(w[int(s)]) for s in StateWord}


def _error_where(words: dict, plan) -> str:
    """The message's {where}: the failing tile (named when the plan holds it), the step-boundary wait or none."""
    tile = words["error_tile"]
    if tile >= 0:
        if plan is not None and tile < plan.header["num_tiles"]:
            return fmt.TILE_WHERE.format(tile=tile, tile_name=plan.tile_name(tile))
        return fmt.UNNAMED_TILE_WHERE.format(tile=tile)
    return fmt.STEP_WAIT_WHERE if words["error"] == ErrorCode.WAIT_TIMEOUT else fmt.NO_TILE_WHERE


def describe_error(words: dict, plan=None) -> str | None:
    """A one-paragraph description of the recorded error, or None when the state holds none. The texts are
    planner/format.py's templates; csrc/plan_names.cpp formats the C++ op's messages from the same ones."""
    code = words["error"]
    if code == ErrorCode.OK:
        return None
    values = dict(code=code, counter=words["error_counter"], seen=words["error_seen"], wanted=words["error_wanted"],
                  seen_u=words["error_seen"] & 0xFFFFFFFF, wanted_u=words["error_wanted"] & 0xFFFFFFFF)
    if code in ErrorCode._value2member_map_:
        name = ErrorCode(code).name
        meaning = fmt.ERROR_TEXTS.get(ErrorCode(code), "")
        detail = fmt.ERROR_DETAILS.get(ErrorCode(code), "")
        if code == ErrorCode.WAIT_TIMEOUT and words["error_counter"] == FLAG_WAIT_COUNTER:
            detail = fmt.FLAG_WAIT_DETAIL
    else:
        name = fmt.UNKNOWN_ERROR_NAME.format(**values)
        meaning, detail = fmt.UNKNOWN_ERROR_TEXT, fmt.UNKNOWN_ERROR_DETAIL
    return fmt.ERROR_MESSAGE.format(name=name, meaning=meaning, worker=words["error_worker"],
                                    where=_error_where(words, plan), step=words["error_step"],
                                    detail=detail.format(**values))


def check_state(state: torch.Tensor, plan=None) -> None:
    """Raise TileKernelError (a RuntimeError) if the kernel recorded an error in `state`. Host sync.

    `plan`: the Plan the state belongs to (tiles_ext.planner.plan.Plan), to name the failing tile."""
    words = error_words(state)
    msg = describe_error(words, plan)
    if msg is not None:
        raise TileKernelError(msg, words)
