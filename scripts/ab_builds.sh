#!/usr/bin/env bash
# Two builds on one GPU in one call: an older commit against this checkout. Bit identity of the op's logits and
# tokens on the same inputs, and op ms/token in alternating rounds (old, new, old, new), per MODEL:PROMPT.
#
# Here (with git):       bash scripts/ab_builds.sh pack OLD_COMMIT      -> build/ab/old.tar.gz (the product tree)
# On the GPU machine:    bash scripts/ab_builds.sh run [MODEL:PROMPT ...] (carry build/ab; writes $OUT/ab/)
# Default workloads: the benchmark's Llama-3.2-1B and SmolLM2-135M rows (prompts 32 and 4096) and the Llama
# 3B / 8B shapes at prompt 32. The old tree is built with `setup.py build_ext --inplace` and imported through
# PYTHONPATH (ahead of this checkout's editable install), with this checkout's configs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
case "${1:-}" in
  pack)
    [ -n "${2:-}" ] || { echo "usage: bash scripts/ab_builds.sh pack OLD_COMMIT"; exit 2; }
    mkdir -p build/ab
    git archive "$2" csrc planner integrations tiles_ext configs setup.py pyproject.toml | gzip > build/ab/old.tar.gz
    echo "$2" > build/ab/old.commit
    echo "wrote build/ab/old.tar.gz ($(du -h build/ab/old.tar.gz | cut -f1)) of $2"
    exit 0 ;;
  run) shift ;;
  *) echo "usage: bash scripts/ab_builds.sh pack OLD_COMMIT | run [MODEL:PROMPT ...]"; exit 2 ;;
esac
SPECS=${*:-"llama-3.2-1b:32 llama-3.2-1b:4096 smollm2-135m:32 smollm2-135m:4096 llama-3.2-3b:32 llama-3.1-8b:32"}
OUTDIR="${OUT:-build/ab-run}/ab"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"
[ -f build/ab/old.tar.gz ] || { echo "[ab] no build/ab/old.tar.gz: run 'pack OLD_COMMIT' here first and carry build/ab"; exit 2; }
rm -rf /tmp/ab-old /tmp/ab-oldpkg && mkdir -p /tmp/ab-old && tar xzf build/ab/old.tar.gz -C /tmp/ab-old
echo "[ab] building the old tree ($(cat build/ab/old.commit 2>/dev/null)) and this checkout"
( cd /tmp/ab-old && python3 setup.py build_ext --inplace > /tmp/ab-old-build.log 2>&1 ) &
OLD=$!
source scripts/setup.sh || { echo "[ab] this checkout's build failed"; exit 1; }
cd "$ROOT"
wait $OLD || { tail -30 /tmp/ab-old-build.log; echo "[ab] the old build failed"; exit 1; }
mkdir -p /tmp/ab-oldpkg/tiles_ext/configs
cp -r /tmp/ab-old/tiles_ext/. /tmp/ab-oldpkg/tiles_ext/
cp -r /tmp/ab-old/planner /tmp/ab-oldpkg/tiles_ext/planner
cp -r /tmp/ab-old/integrations /tmp/ab-oldpkg/tiles_ext/integrations
cp configs/*.json /tmp/ab-oldpkg/tiles_ext/configs/
for round in 1 2; do
  (cd /tmp && PYTHONPATH=/tmp/ab-oldpkg python3 -P "$ROOT/scripts/op_timing.py" "old$round" "$OUTDIR" $SPECS) \
    || echo "[ab] old round $round failed"
  (cd /tmp && python3 -P "$ROOT/scripts/op_timing.py" "new$round" "$OUTDIR" $SPECS) || echo "[ab] new round $round failed"
done
python3 - "$OUTDIR" <<'PY'
import json, sys
import torch
d = sys.argv[1]
old, new = torch.load(f"{d}/old1.pt"), torch.load(f"{d}/new1.pt")
rounds = {r: json.load(open(f"{d}/{r}.json")) for r in ("old1", "new1", "old2", "new2")}
print("| workload | hand-off old / new | bit-identical | old ms/token (2 rounds) | new | new / old |")
print("|---|---|---|---|---|---|")
for k in old:
    same = k in new and torch.equal(old[k]["logits"], new[k]["logits"]) and torch.equal(old[k]["tokens"], new[k]["tokens"])
    o = [rounds[r][k]["median"] for r in ("old1", "old2")]
    n = [rounds[r][k]["median"] for r in ("new1", "new2")]
    print(f"| {k} | {old[k]['handoff']} / {new.get(k, {}).get('handoff')} | {same} | {o[0]:.4f}, {o[1]:.4f} | "
          f"{n[0]:.4f}, {n[1]:.4f} | {sum(n) / sum(o):.4f} |")
PY
