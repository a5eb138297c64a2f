"""Errors raised by tiles_ext.patch and the patched model. Each message names what is unsupported and what is."""
import warnings

# The tile op reports errors in its state words (a CUDA launch cannot raise synchronously); one exception type
# for them, whoever reads the words.
from tiles_ext.errors import TileKernelError as TileOpError  # noqa: F401


class UnsupportedModelError(ValueError):
    """patch() was given a model the tile op cannot run: architecture, dtype, device or weight layout."""


class CacheFullError(RuntimeError):
    """A decode step would write past the end of the StaticCache (raised before anything is written)."""


class TilesFallbackWarning(UserWarning):
    """A call the tile op cannot serve runs in PyTorch instead (same answer, PyTorch speed)."""


def warn_fallback(message: str, stacklevel: int = 3) -> None:
    warnings.warn(message, TilesFallbackWarning, stacklevel=stacklevel)
