#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over a small decode run of the persistent kernel (tiny random Llama,
# 8 workers, one single-token and one multi-token launch). Prints CLEAN / NOT CLEAN per tool; logs go to
# $SANITIZE_LOGDIR (default /tmp) as sanitize-<tool>.log. Exit status 0 only when both tools are clean.
# SANITIZE_CACHE / SANITIZE_POS (default 64 / 40: one K/V chunk) set the cache length and the position, e.g.
# 1024 / 700 for attention tiles of several chunks (the double buffer's later chunks).
set -u
PY=${PYTHON:-python3}
LOGDIR=${SANITIZE_LOGDIR:-/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
script=$(mktemp --suffix .py)
cat > "$script" <<'EOF'
import os

import torch
import tiles_ext  # noqa: F401
from transformers import LlamaConfig
from tiles_ext.errors import check_state
from tiles_ext.models import random_model
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  intermediate_size=512, num_hidden_layers=2, vocab_size=512, max_position_embeddings=4096)
model = random_model(cfg, device="cuda", seed=0)
plan = build_plan(cfg, workers=8, gpu=GpuTarget.of_device("cuda"))
rt = TileRuntime(plan, "cuda")
w = model_weights(model)
inv, scale = rope_tables(model)
n, p = int(os.environ.get("SANITIZE_CACHE", "64")), int(os.environ.get("SANITIZE_POS", "40"))
k = [torch.randn(1, 2, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
v = [torch.randn(1, 2, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
ids, pos = torch.tensor([3], device="cuda"), torch.tensor([p], device="cuda")
l1, t1 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 1, [])
l4, t4 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 4, [])
torch.cuda.synchronize()
check_state(rt.state, plan)
assert torch.isfinite(l4).all() and int(t4[0]) == int(t1[0])
print("small decode run ok, tokens", t4.tolist())
EOF
export TILES_WAIT_TIMEOUT_MS=${TILES_WAIT_TIMEOUT_MS:-120000} PYTHONUNBUFFERED=1
status=0
for tool in memcheck racecheck; do
  log="$LOGDIR/sanitize-$tool.log"
  (cd "$ROOT" && timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      --kernel-name kns=decode_kernel "$PY" "$script") >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "small decode run ok" "$log"; then
    echo "sanitize $tool: CLEAN ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1))"
  else
    echo "sanitize $tool: NOT CLEAN (exit $rc; see $log)"
    tail -25 "$log"
    status=1
  fi
done
rm -f "$script"
exit $status
