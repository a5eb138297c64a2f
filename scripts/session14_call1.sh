set -uo pipefail
source scripts/ab_common.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/kv_probe.cu -o /tmp/kv_probe && /tmp/kv_probe | tee $OUT/kv_probe.txt
echo "=== probe t=$(( $(date +%s) - AB_T0 ))"
build main
timeout 120 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -5 | tee $OUT/gputests.txt
timeout 100 python3 scripts/tile_timing.py --model llama-3.2-1b --ctx 4096 --steps 4 --opts 25183 --json $OUT/tt-4096.json > $OUT/tt-4096.txt 2>&1
grep -A20 "us/token" $OUT/tt-4096.txt | head -24
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
