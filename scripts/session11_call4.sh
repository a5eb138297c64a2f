#!/usr/bin/env bash
# Session 11's fourth device call (~3.5 min): weight loads in flight per lane and row after v38 (setup.py
# TILES_KUNROLL; 4 is the default, measured against 8 in v9). Main's code at 9d9a896 (v38's SASS); the base
# figures are call 3's (same SASS, same session).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build k5 TILES_KUNROLL=5
ab k5 25183 1
build k6 TILES_KUNROLL=6
ab k6 25183 1
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
