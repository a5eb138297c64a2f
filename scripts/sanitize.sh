#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over small decode runs of the persistent kernels: a tiny random Llama on
# 8 workers, one single-token and one multi-token launch, for each hand-off (counters, flags) and attention kernel
# (head_dim 64: the warp path; 128: the five-step loop). Prints CLEAN / NOT CLEAN per tool; exit status 0 only when
# both tools are clean. TILES_WAIT_TIMEOUT_MS defaults to 120000 here (the tools slow the kernel down).
# Usage: bash scripts/sanitize.sh [--logdir DIR] [--cache N] [--pos P] [--handoffs counters,flags]
#                                 [--head-dims 64,128] [--timeout S] [--python PY]
#   --logdir     where sanitize-<tool>.log goes (default /tmp)
#   --cache, --pos  cache length and position (default 64 / 40: one K/V chunk; e.g. 1024 / 700 for attention tiles
#                of several chunks, the double buffer's later chunks)
#   --timeout    seconds per tool (default 300)
#   --python     the python that runs the decode (default python3)
set -u
LOGDIR=/tmp CACHE=64 POS=40 HANDOFFS=counters,flags HEAD_DIMS=64,128 TIMEOUT=300 PY=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --logdir) LOGDIR=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --pos) POS=$2; shift 2 ;;
    --handoffs) HANDOFFS=$2; shift 2 ;;
    --head-dims) HEAD_DIMS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "sanitize: unknown argument: $1 (see --help)"; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$LOGDIR"
script=$(mktemp --suffix .py)
cat > "$script" <<'PYEOF'
import sys

import torch
import tiles_ext  # noqa: F401
from transformers import LlamaConfig
from tiles_ext.errors import check_state
from tiles_ext.models import random_model
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

n, p = int(sys.argv[1]), int(sys.argv[2])
for hd in (int(x) for x in sys.argv[4].split(",")):
    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=hd,
                      intermediate_size=512, num_hidden_layers=2, vocab_size=512, max_position_embeddings=4096)
    model = random_model(cfg, device="cuda", seed=0)
    plan = build_plan(cfg, workers=8, gpu=GpuTarget.of_device("cuda"))
    w = model_weights(model)
    inv, scale = rope_tables(model)
    for handoff in sys.argv[3].split(","):
        rt = TileRuntime(plan, "cuda", handoff)
        k = [torch.randn(1, 2, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        v = [torch.randn(1, 2, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        ids, pos = torch.tensor([3], device="cuda"), torch.tensor([p], device="cuda")
        l1, t1 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 1, [])
        l4, t4 = rt.step(w, k, v, ids, pos, inv.cuda(), scale, 4, [])
        torch.cuda.synchronize()
        check_state(rt.state, plan)
        assert torch.isfinite(l4).all() and int(t4[0]) == int(t1[0])
        print(f"head_dim {hd} {handoff}: tokens {t4.tolist()}")
print("small decode runs ok")
PYEOF
export TILES_WAIT_TIMEOUT_MS=${TILES_WAIT_TIMEOUT_MS:-120000} PYTHONUNBUFFERED=1
status=0
for tool in memcheck racecheck; do
  log="$LOGDIR/sanitize-$tool.log"
  (cd "$ROOT" && timeout "$TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      --kernel-name kns=decode_kernel "$PY" "$script" "$CACHE" "$POS" "$HANDOFFS" "$HEAD_DIMS") >"$log" 2>&1
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
