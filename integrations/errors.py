"""Errors raised by tiles_ext.patch and the patched model. Each message names what is unsupported and what is."""
import os
import sys
import warnings

import torch
import transformers

# The tile op reports errors in its state words (a CUDA launch cannot raise synchronously); one exception type
# for them, whoever reads the words.
from tiles_ext.errors import TileKernelError as TileOpError  # noqa: F401


class UnsupportedModelError(ValueError):
    """patch() was given a model the tile op cannot run: architecture, dtype, device or weight layout."""


class CacheFullError(RuntimeError):
    """A decode step would write past the end of the StaticCache (raised before anything is written)."""


class TilesFallbackWarning(UserWarning):
    """A call the tile op cannot serve runs in PyTorch instead (same answer, PyTorch speed)."""


def warn_fallback(message: str) -> None:
    warnings.warn(message, TilesFallbackWarning, stacklevel=caller_stacklevel())


# Frames in these packages are the machinery between a user's call and a warning (the patched methods, nn.Module's
# call, generate's loop): a warning names the first frame outside them, the user's line.
_MACHINERY = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, transformers)) + (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def caller_stacklevel() -> int:
    """warnings.warn's stacklevel, for a call made here, that points at the first frame outside Tiles, torch and
    Transformers."""
    frame, level = sys._getframe(2), 2  # the caller of warn_fallback is level 2 for warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame, level = frame.f_back, level + 1
    return level
