#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over small decode runs of the persistent kernels: tiny random 2-layer
# models on 8 workers, one single-token and one multi-token launch, for each hand-off (counters, flags) and case:
#   llama-hd64, llama-hd128   the head_dim-64 and -128 kernels (G 2)
#   qwen2-bias                q/k/v biases (the QKV epilogue's staged bias words), G 7 at head_dim 64
#   qwen3-qknorm              per-head q/k RMSNorms, head_dim 128, q width 512 at hidden 256
#   phi3-hd96                 the head_dim-96 kernels (chunks of 85 positions), G 1
#   llama-fp8, qwen2-fp8-block128  the FP8 kernels (E4M3 layers; per-row scales, 128 x 128 block scales with
#                             partial edge blocks), counter hand-offs
# and, for the BF16 cases, a verify pass of 4 rows after the steps (the rows kernels, decode_rows.cuh).
# Prints CLEAN / NOT CLEAN per tool; exit status 0 only when both tools are clean. TILES_WAIT_TIMEOUT_MS defaults to
# 120000 here (the tools slow the kernel down).
# Usage: bash scripts/sanitize.sh [--logdir DIR] [--cache N] [--pos P] [--handoffs counters,flags]
#                                 [--cases llama-hd64,...] [--timeout S] [--python PY]
#   --logdir     where sanitize-<tool>.log goes (default /tmp)
#   --cache, --pos  cache length and position (default 64 / 40: one K/V chunk; e.g. 1024 / 700 for attention tiles
#                of several chunks, the double buffer's later chunks)
#   --cases      a comma-separated subset of the cases above (default all)
#   --timeout    seconds per tool (default 300)
#   --python     the python that runs the decode (default python3)
set -u
LOGDIR=/tmp CACHE=64 POS=40 HANDOFFS=counters,flags CASES=llama-hd64,llama-hd128,qwen2-bias,qwen3-qknorm,phi3-hd96,llama-fp8,qwen2-fp8-block128
TIMEOUT=300 PY=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --logdir) LOGDIR=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --pos) POS=$2; shift 2 ;;
    --handoffs) HANDOFFS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "sanitize: unknown argument: $1 (see --help)"; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$LOGDIR"
script=$(mktemp --suffix .py)
cat > "$script" <<'PYEOF'
import dataclasses
import sys

import torch
import tiles_ext  # noqa: F401
from transformers import AutoConfig
from tiles_ext.errors import check_state
from tiles_ext.families import shape_of
from tiles_ext.models import random_model
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

# case: (model_type, hidden, heads, kv heads, head_dim[, FP8 weight format])
CASES = {"llama-hd64": ("llama", 256, 4, 2, 64), "llama-hd128": ("llama", 256, 4, 2, 128),
         "qwen2-bias": ("qwen2", 448, 7, 1, 64), "qwen3-qknorm": ("qwen3", 256, 4, 2, 128),
         "phi3-hd96": ("phi3", 384, 4, 4, 96), "llama-fp8": ("llama", 320, 5, 1, 64, "fp8"),
         "qwen2-fp8-block128": ("qwen2", 448, 7, 1, 64, "fp8_block128")}


def quantize(model, shape):
    """The model's layers as E4M3 Fp8Linear in the shape's weight format (the FP8 kernels' cases)."""
    from tiles_ext.families import family_for, model_type_of
    from tiles_ext.fp8 import Fp8Linear, quantize_block128, quantize_per_channel
    from tiles_ext.fp8.model import layer_paths
    quantizer = quantize_per_channel if shape.weight_format == "fp8" else quantize_block128
    for path in layer_paths(family_for(model_type_of(model.config)), shape):
        parent, _, name = path.rpartition(".")
        linear = model.get_submodule(path)
        q, scale = quantizer(linear.weight)
        setattr(model.get_submodule(parent), name, Fp8Linear(q.to(linear.weight.device),
                                                             scale.to(linear.weight.device), linear.bias))


n, p = int(sys.argv[1]), int(sys.argv[2])
for case in sys.argv[4].split(","):
    model_type, hidden, heads, kvh, hd, *fp8 = CASES[case]
    cfg = AutoConfig.for_model(model_type, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kvh,
                               head_dim=hd, intermediate_size=512, num_hidden_layers=2, vocab_size=512,
                               max_position_embeddings=4096, pad_token_id=None, eos_token_id=None,
                               tie_word_embeddings=False)
    model = random_model(cfg, device="cuda", seed=0)
    with torch.no_grad():  # non-zero biases (Transformers initialises them to zero)
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.uniform_(-0.5, 0.5)
    shape = dataclasses.replace(shape_of(cfg), weight_format=fp8[0] if fp8 else "bf16")
    if fp8:
        quantize(model, shape)
    plan = build_plan(shape, workers=8, gpu=GpuTarget.of_device("cuda"))
    w = model_weights(model, plan.shape)
    inv, scale = rope_tables(model)
    for handoff in ["counters"] if fp8 else sys.argv[3].split(","):  # FP8 kernels: counter hand-offs only
        rt = TileRuntime(plan, "cuda", handoff)
        k = [torch.randn(1, kvh, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        v = [torch.randn(1, kvh, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        ids, pos = torch.tensor([3], device="cuda"), torch.tensor([p], device="cuda")
        l1, t1 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 1, [])
        l4, t4 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 4, [])
        torch.cuda.synchronize()
        check_state(rt.state, plan)
        assert torch.isfinite(l4).all() and int(t4[0]) == int(t1[0])
        if not fp8:  # a verify pass of 4 rows after the steps (the rows kernel; BF16 plans)
            lr, tr = rt.step(w, k, v, torch.tensor([3, 5, 7, 9], device="cuda"), torch.tensor([p + 4], device="cuda"),
                             inv.cuda(), scale, 1, [])
            torch.cuda.synchronize()
            check_state(rt.state, plan)
            assert torch.isfinite(lr).all() and lr.shape[0] == 4
        print(f"{case} {handoff}: tokens {t4.tolist()}")
print("small decode runs ok")
PYEOF
export TILES_WAIT_TIMEOUT_MS=${TILES_WAIT_TIMEOUT_MS:-120000} PYTHONUNBUFFERED=1
status=0
for tool in memcheck racecheck; do
  log="$LOGDIR/sanitize-$tool.log"
  (cd "$ROOT" && timeout "$TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      --kernel-name kns=decode "$PY" "$script" "$CACHE" "$POS" "$HANDOFFS" "$CASES") >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "small decode runs ok" "$log"; then
    echo "sanitize $tool: CLEAN ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1))"
  else
    echo "sanitize $tool: NOT CLEAN (exit $rc; see $log)"
    tail -25 "$log"
    status=1
  fi
done
rm -f "$script"
exit $status
