"""Stall samples and shared-memory wavefronts of an ncu source export (ncu_attn.sh's *-sass.csv), per CUDA source line.
ncu's own per-line view (--print-source cuda) came back without metrics on the device (session 24), so the SASS rows
are mapped here: by offset into the kernel, against `nvdisasm -g -c` of the same build compiled locally
(scripts/local_sass.sh TAG [-D knobs], the listing /tmp/sass_TAG_default.txt; the script counts rows whose opcode
differs, which must be 0), each instruction to the innermost source line nvdisasm names (inlined code is attributed to
the callee's line).
Usage: python scripts/ncu_lines.py SASS_CSV NVDISASM_TXT [--top 40] [--regions LO-HI:name,...] [--lds LO-HI]
                                   [--file NAME] [--function SYMBOL_PART] [--base BASE_CSV BASE_TXT]
  --regions  samples and top stall reasons summed over line ranges of one source file (--file: decode_kernel.cu,
             the default, or one of its parts: attention.cuh, matvec.cuh, ...)
  --lds      every LDS / SHFL of those lines (same file): executions, wavefronts per execution (ncu's and the
             ideal), samples
  --base     a second build's export and listing of the same source file (e.g. a knob off and on, profiled in one
             device call): total samples and executed instructions of both, and the --top lines whose samples differ
             most (session 25: where a change's cost at prompt 32 sits, or that it sits nowhere in particular)"""
import argparse
import csv
import re
from collections import defaultdict


KERNEL = "decode_kernelILb0ELb0ELb0ELb0E"  # the default variant's kernel symbol (the one the op launches)
SOURCE = "decode_kernel.cu"  # the default file of line ranges (its parts: attention.cuh, matvec.cuh, ...)


def opcode(text):
    """The mnemonic without predicate and modifiers: '@P0 LDS.128 R4, [R2]' -> 'LDS'."""
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def parse_sass(lines, function=KERNEL):
    """{offset: (instruction text, file name, line)} of the function whose symbol contains `function` (the default
    variant's kernel), from nvdisasm -g -c output."""
    out, fname, line, inside = {}, None, 0, False
    for s in lines:
        m = re.match(r"\s*\.text\.(\S+):", s)
        if m:
            inside = function in m.group(1)
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', s)
        if m:
            fname, line = m.group(1).rsplit("/", 1)[-1], int(m.group(2))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", s)
        if m and inside:
            out[int(m.group(1), 16)] = (m.group(2), fname, line)
    return out


def parse_csv(lines):
    """(header index by name, [(offset into the kernel, row)]) of ncu's source page (--page source --csv
    --print-source sass; its first row is the kernel's first instruction)."""
    rows = list(csv.reader(lines))
    hdr = next(r for r in rows if r and r[0] == "Address")
    body = [r for r in rows[rows.index(hdr) + 1:] if r and r[0].startswith("0x")]
    base = int(body[0][0], 16)
    return {n: i for i, n in enumerate(hdr)}, [(int(r[0], 16) - base, r) for r in body]


def _num(r, col, name):
    return float(r[col[name]] or 0) if name in col else 0.0


def per_line(col, body, sass):
    """({(file, line): {samples, instr, stall_*: samples}}, rows whose opcode differs from the local build)."""
    stalls = [n for n in col if n.startswith("stall_") and "Not Issued" not in n]
    agg, bad = defaultdict(lambda: defaultdict(float)), 0
    for off, r in body:
        text, f, ln = sass.get(off, ("?", "?", 0))
        if opcode(text) != opcode(r[1]):
            bad += 1
        d = agg[(f, ln)]
        d["samples"] += _num(r, col, "# Samples")
        d["instr"] += _num(r, col, "Instructions Executed")
        for s in stalls:
            d[s] += _num(r, col, s)
    return agg, bad


def top_stalls(d, k=4):
    names = sorted((n for n in d if n.startswith("stall_")), key=lambda n: -d[n])[:k]
    return ", ".join(f"{n[6:]} {d[n] / max(d['samples'], 1):.0%}" for n in names)


def region(agg, lo, hi, fname=SOURCE):
    out = defaultdict(float)
    for (f, ln), d in agg.items():
        if f == fname and lo <= ln <= hi:
            for k, v in d.items():
                out[k] += v
    return out


def lds_rows(col, body, sass, lo, hi, fname=SOURCE):
    """(offset, line, instruction, executions, wavefronts per execution, ideal, samples) of the LDS / SHFL rows."""
    out = []
    for off, r in body:
        _, f, ln = sass.get(off, ("?", "?", 0))
        if f == fname and lo <= ln <= hi and opcode(r[1]) in ("LDS", "LDSM", "SHFL"):
            ex = _num(r, col, "Instructions Executed")
            wf = _num(r, col, "L1 Wavefronts Shared") / ex if ex else 0.0
            ideal = _num(r, col, "L1 Wavefronts Shared Ideal") / ex if ex else 0.0
            out.append((off, ln, r[1].strip(), ex, wf, ideal, _num(r, col, "# Samples")))
    return out


def load(csv_path, sass_path, function=KERNEL):
    """per_line of one build: its ncu export against its local listing."""
    with open(sass_path) as f:
        sass = parse_sass(f, function)
    with open(csv_path, newline="") as f:
        col, body = parse_csv(f)
    return col, body, sass


def compare(base, new, top):
    """Lines of two builds' per_line aggregates (the same source file): [(sample difference, instruction difference,
    (file, line), base samples, new samples)], largest sample differences first."""
    rows = []
    for k in set(base) | set(new):
        b, n = base.get(k, {}), new.get(k, {})
        rows.append((n.get("samples", 0.0) - b.get("samples", 0.0), n.get("instr", 0.0) - b.get("instr", 0.0), k,
                     b.get("samples", 0.0), n.get("samples", 0.0)))
    return sorted(rows, key=lambda r: (-abs(r[0]), r[2]))[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("sass")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--regions", default="")
    ap.add_argument("--lds", default="")
    ap.add_argument("--file", default=SOURCE)
    ap.add_argument("--function", default=KERNEL)
    ap.add_argument("--base", nargs=2, metavar=("BASE_CSV", "BASE_TXT"))
    a = ap.parse_args()
    col, body, sass = load(a.csv, a.sass, a.function)
    agg, bad = per_line(col, body, sass)
    if a.base:
        base, bad_b = per_line(*load(*a.base, a.function))
        tot = [sum(d[k] for d in g.values()) for g in (base, agg) for k in ("samples", "instr")]
        print(f"opcode mismatches {bad_b} / {bad}; samples {tot[0]:.0f} -> {tot[2]:.0f} ({tot[2] / tot[0] - 1:+.2%}), "
              f"instructions {tot[1]:.0f} -> {tot[3]:.0f} ({tot[3] / tot[1] - 1:+.2%})")
        for ds, di, (f, ln), sb, sn in compare(base, agg, a.top):
            print(f"{f}:{ln:<5} samples {sb:7.0f} -> {sn:7.0f} ({ds:+6.0f})  instr {di:+11.0f}")
        return
    total = sum(d["samples"] for d in agg.values()) or 1.0
    print(f"{len(body)} SASS rows, {bad} whose opcode differs from the local build; {total:.0f} samples")
    for (f, ln), d in sorted(agg.items(), key=lambda kv: -kv[1]["samples"])[: a.top]:
        print(f"{f}:{ln:<5} {d['samples'] / total:6.2%}  instr {d['instr']:10.0f}  {top_stalls(d)}")
    for reg in filter(None, a.regions.split(",")):
        span, name = reg.split(":")
        lo, hi = map(int, span.split("-"))
        d = region(agg, lo, hi, a.file)
        print(f"region {name} ({a.file} {lo}-{hi}): {d['samples'] / total:6.2%} of samples, instr {d['instr']:.0f}; "
              f"{top_stalls(d, 6)}")
    if a.lds:
        lo, hi = map(int, a.lds.split("-"))
        for off, ln, text, ex, wf, ideal, n in lds_rows(col, body, sass, lo, hi, a.file):
            if ex:
                print(f"{off:6x} line {ln:5d} {text[:44]:44s} exec {ex:9.0f} wavefronts {wf:4.2f} (ideal {ideal:4.2f})"
                      f" samples {n:.0f}")


if __name__ == "__main__":
    main()
