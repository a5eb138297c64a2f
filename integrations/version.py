"""The Transformers versions the glue supports, and the names that changed between them.

Minimum 5.4: from 5.4 on, StaticLayer.cumulative_length (a device tensor) is the cache's write position and
Llama no longer takes cache_position; the decode path reads and advances that counter. 5.0-5.3 took the write
position from cache_position instead and are refused rather than half supported. Tested: 5.4 (the minimum), 5.17
(the GPU machine's), 5.24 and 5.25; assisted generation (tests/test_integration_assisted.py) on the CPU op with
5.4, 5.7, 5.17 and 5.25.
"""
from __future__ import annotations

import re

MIN_TRANSFORMERS = (5, 4)
TESTED_TRANSFORMERS = ("5.4", "5.17", "5.24", "5.25")


class TransformersVersionError(RuntimeError):
    """The installed Transformers is outside what tiles_ext.integrations supports."""


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise TransformersVersionError(f"cannot read the Transformers version {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_transformers_version() -> str:
    """Raises TransformersVersionError below the minimum; returns the installed version."""
    import transformers
    version = transformers.__version__
    if parse_version(version)[:2] < MIN_TRANSFORMERS:
        need = ".".join(map(str, MIN_TRANSFORMERS))
        raise TransformersVersionError(
            f"tiles_ext.patch needs transformers >= {need} (decode positions come from "
            f"StaticLayer.cumulative_length, introduced in 5.4); found transformers {version}. "
            f"Upgrade with: pip install -U 'transformers>={need}'")
    from transformers.cache_utils import StaticLayer
    if not hasattr(StaticLayer(max_cache_len=1), "cumulative_length"):
        raise TransformersVersionError(
            f"transformers {version}: StaticLayer has no cumulative_length, which the tile decode path advances; "
            f"tested versions: {', '.join(TESTED_TRANSFORMERS)}")
    return version


def cache_field() -> str:
    """Name of the cache in model outputs, generate outputs and generate's model_kwargs: `cache` from 5.2x
    (past_key_values became a deprecated alias), `past_key_values` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast
    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def transformers_version() -> str:
    import transformers
    return transformers.__version__


def assisted_takes_static_cache() -> bool:
    """Whether Transformers' assisted decoding accepts a StaticCache subclass as the main model's cache (the tile
    op's CroppableStaticCache): 5.4 refuses every cache with a compileable layer, and a StaticLayer is one; from 5.5
    on it refuses only a plain StaticCache (type(cache) is StaticCache)."""
    return parse_version(transformers_version())[:2] >= (5, 5)
