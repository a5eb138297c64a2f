"""Transformers glue (installed as tiles_ext.integrations): tiles_ext.patch(model) / tiles_ext.unpatch(model).

    model = tiles_ext.patch(AutoModelForCausalLM.from_pretrained(..., dtype=torch.bfloat16))
    model.generate(**inputs)          # prefill in PyTorch, every decode step on the tile schedule

Files: version (Transformers gate), planning (plan for the model's device, disk cache), decoder (plan bound to
device + weights), bindings (are the bound weights still the module's?), state (what patch changed, re-binding),
cache (StaticCache glue), causal_lm (family dispatch through tiles_ext.families, checks, patched forward), generate
(patched generate: routing), fast_greedy (multi-token greedy loop), patch (patch/unpatch, copies).
"""
from tiles_ext.integrations.errors import CacheFullError, TileOpError, TilesFallbackWarning, UnsupportedModelError
from tiles_ext.integrations.patch import is_patched, patch, patch_state, unpatch
from tiles_ext.integrations.version import MIN_TRANSFORMERS, TransformersVersionError

__all__ = ["patch", "unpatch", "is_patched", "patch_state", "UnsupportedModelError", "CacheFullError",
           "TileOpError", "TilesFallbackWarning", "TransformersVersionError", "MIN_TRANSFORMERS"]
