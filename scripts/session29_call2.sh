#!/bin/bash
# Session 29, call 2 (result: perf log, session 29: no-wait bound 0.723 ms at ctx 32). The bounds of main on the
# day's machine, for issue 8's verdict: the read ceilings (stream_probe: TMA ring and plain loads; the benchmark's
# own read bandwidth), then wait_bound.py '*<*' (every dependency wait inside a step moved to the previous step:
# timing only, wrong results): what main would run if every hand-off were free. ~3 min.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
run_probe stream_probe 90
build tree
timeout 60 python3 -c "
import torch; from tiles_ext.bench.bandwidth import measure_read_bandwidth as m
print('bench read bandwidth', m(torch.device('cuda')))" 2>&1 | grep -v Warning
timeout 240 python3 scripts/wait_bound.py --rounds 2 --variants "*<*" \
  --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "BOUND\|moved\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
