"""Tiles: batch-1 LLM decoding in Hugging Face Transformers at the speed of GPU memory.

    import tiles_ext
    model = tiles_ext.patch(model)   # every decode step of model.generate() now runs on the tile schedule

Importing this package loads the compiled op library (registers torch.ops.tiles.decode_step with its CPU,
CUDA where built, and fake kernels). The planner is tiles_ext.planner, the Transformers glue
tiles_ext.integrations.
"""
__version__ = "0.1.0"

_BUILD_HINT = (
    "build it from the repository root with `pip install --no-build-isolation -e .` "
    "(or run `bash scripts/test.sh`, which sets up .venv and builds)")

import importlib.util as _ilu

import torch

_spec = _ilu.find_spec(__name__ + "._C")
if _spec is None or _spec.origin is None:
    raise ImportError(f"tiles_ext: the compiled extension tiles_ext._C is not built; {_BUILD_HINT}.")
try:
    # dlopen through torch (after torch's own libraries are loaded): the library is a plain TORCH_LIBRARY
    # registration and needs no Python module init function.
    torch.ops.load_library(_spec.origin)
except OSError as e:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        f"tiles_ext: the compiled extension {_spec.origin} could not be loaded ({e}); {_BUILD_HINT}. "
        "If it was built against another torch, rebuild it with the torch you import now.") from e

from tiles_ext import ops  # noqa: E402,F401  (the fake kernel for torch.compile; must import after _C)

_LAZY = {"patch", "unpatch"}
__all__ = ["patch", "unpatch", "ops", "__version__"]


def __getattr__(name):
    # patch/unpatch live in tiles_ext.integrations, which imports transformers: load it only when asked,
    # so `import tiles_ext` stays cheap for the planner and the op alone.
    if name in _LAZY:
        from tiles_ext import integrations
        return getattr(integrations, name)
    raise AttributeError(f"module 'tiles_ext' has no attribute {name!r}")
