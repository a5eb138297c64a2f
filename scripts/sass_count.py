"""Static SASS instruction counts of line ranges of one kernel source file (--file: decode_kernel.cu or one of its
parts, attention.cuh, matvec.cuh, ...), from an nvdisasm -g -c listing (scripts/local_sass.sh): count a design's
instructions before building it (perf log, sessions 23-24: the attention chunk is bound by instruction issue). Each
instruction counts for the innermost source line nvdisasm names, so an inlined helper's instructions count under the
helper's lines: give its range too. Every copy the compiler made counts (a cold tail of an unrolled loop too): the
warp path's chunk lines hold 659 instructions, of which one block of 469 runs per chunk. ncu_lines.py gives the
executed counts.
Usage: python scripts/sass_count.py LISTING LO-HI[,LO-HI ...] [--file NAME] [--function SYMBOL_PART]
Prints the instructions in the ranges, then the count per opcode (predicate and modifiers dropped), most first."""
import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_lines import KERNEL, SOURCE, opcode, parse_sass  # noqa: E402


def count(sass, ranges, fname=SOURCE):
    """Counter of opcodes over the instructions of `sass` (parse_sass) whose line lies in one of `ranges`."""
    return Counter(opcode(text) for text, f, ln in sass.values()
                   if f == fname and any(lo <= ln <= hi for lo, hi in ranges))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("listing")
    ap.add_argument("ranges")
    ap.add_argument("--function", default=KERNEL)
    ap.add_argument("--file", default=SOURCE)
    a = ap.parse_args()
    ranges = [tuple(map(int, r.split("-"))) for r in a.ranges.split(",")]
    with open(a.listing) as f:
        c = count(parse_sass(f, a.function), ranges, a.file)
    print(f"{sum(c.values())} instructions in {a.file} lines {a.ranges}")
    print(", ".join(f"{op} {n}" for op, n in c.most_common()))


if __name__ == "__main__":
    main()
