#!/bin/bash
# Session 29, call 4 (result: 14 passed; kernel_check read 4.345 TB/s with the sweep, every set bit-identical).
# After the review mend: the read sweep with the kernel's ld_weight (csrc/cuda/ld_weight.cuh) and kernel_check.py's
# floor from bench.bandwidth, on the device: main's build, tests/test_read_checksum.py, then kernel_check --quick
# (it now reports the benchmark's reader). ~2.5 min.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build main
timeout 120 python3 -P -m pytest tests/test_read_checksum.py -q -rs 2>&1 | tail -4
timeout 160 python3 scripts/kernel_check.py --quick --no-baseline 2>&1 | grep -v Warning \
  | grep "read bandwidth\|case\|llama\|smollm2-135m ctx\|parity"
echo "total t=$(( $(date +%s) - AB_T0 ))"
