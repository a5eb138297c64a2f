"""FP8 (E4M3) weights: the quantizer, the Fp8Linear layer patch(weights="fp8") installs, and a model's weight
format (docs/numerics.md, "FP8 weights")."""
from tiles_ext.fp8.linear import Fp8Linear
from tiles_ext.fp8.quantize import dequantize, quantize_block128, quantize_per_channel

__all__ = ["Fp8Linear", "dequantize", "quantize_block128", "quantize_per_channel"]
