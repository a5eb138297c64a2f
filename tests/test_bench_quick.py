"""The benchmark: its CPU smoke run end to end (`python -m tiles_ext.bench --quick`), and the pieces whose
mistakes would silently skew published numbers (floor arithmetic, row statistics, README block, GGUF export,
the llama.cpp skip reason)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiles_ext.bench import report, rows
from tiles_ext.bench.workloads import Workload, bytes_per_token, floor_info, mean_decode_context, shape_of

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the quick run, end to end


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-quick")
    p = subprocess.run([sys.executable, "-m", "tiles_ext.bench", "--quick", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=420,
                       env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0, f"bench --quick failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    jsons = list(out.glob("bench-*.json"))
    assert len(jsons) == 1, f"expected one JSON in {out}, found {[j.name for j in jsons]}"
    return out, json.loads(jsons[0].read_text()), p.stdout


@pytest.mark.slow
def test_quick_run_measures_every_cpu_system(quick_run):
    out, result, _ = quick_run
    by_system = {r["system"]: r for r in result["rows"]}
    assert set(by_system) == {"hf-eager", "tiles-generate", "tiles-generate-sample", "tiles-op-multi",
                              "tiles-op-single", "tiles-generate-fp8", "tiles-op-fp8"}
    for r in result["rows"]:
        assert r["status"] == "ok", f"{r['system']}: {r['status']} ({r.get('reason')})"
        ms = r["ms_per_token"]
        assert ms["reps"] >= 3 and len(ms["samples"]) == ms["reps"]
        assert ms["min"] <= ms["median"] <= ms["max"]
        assert r["tokens_per_s"] == pytest.approx(1e3 / ms["median"])
    (w,) = result["workloads"]
    assert w["model"] == "smollm2-135m" and w["weights"] == "real"
    floor = w["floor"]["floor_ms"]
    fp8_floor = floor_info(Workload(w["model"], w["prompt_len"], w["new_tokens"]), result["bandwidth"]["bytes_per_s"],
                           "fp8")["floor_ms"]
    assert fp8_floor < 0.7 * floor  # E4M3 layers, BF16 embedding (tied LM head) and KV
    for r in result["rows"]:
        own = fp8_floor if r["system"].endswith("-fp8") else floor
        assert r.get("floor_ms", own) == pytest.approx(own)
        assert r["pct_of_floor"] == pytest.approx(100 * own / r["ms_per_token"]["median"])
    assert result["bandwidth"]["bytes_per_s"] > 0
    gen = by_system["tiles-generate"]
    assert len(gen["tokens"]) == w["new_tokens"], "generate must produce exactly new_tokens tokens"
    # Real weights: Tiles' greedy tokens agree with eager Transformers' (the first comes from the shared
    # PyTorch prefill, the rest from the op).
    agree, total = map(int, gen["tokens_agreeing_with_eager"].split("/"))
    assert total == w["new_tokens"] and agree >= 2, gen["tokens_agreeing_with_eager"]
    assert "plan" in by_system["tiles-op-multi"]["one_time_s"]


@pytest.mark.slow
def test_quick_run_writes_markdown_and_png(quick_run):
    out, result, stdout = quick_run
    md = next(out.glob("bench-*.md")).read_text()
    assert "| system | ms/token (median)" in md and "Tiles, model.generate()" in md
    pngs = list(out.glob("bench-*-bars.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["figures"] and all((out / f).is_file() for f in result["figures"].values())
    assert result["meta"]["commit"] and result["meta"]["mode"] == "quick"


# --------------------------------------------------------------------------- arithmetic and records


def test_floor_of_llama_1b_matches_the_reference_numbers():
    shape = shape_of("llama-3.2-1b")
    # reference/h200-decode.md: 2,471,624,704 bytes of weights per token (+ the final norm, 4 KB) and 32 KiB of
    # K/V per cached position
    assert abs(shape.weight_bytes() - 2_471_624_704) <= 2 * 2048 + 16 * 2 * 2 * 2048
    assert bytes_per_token(shape, 4096) - bytes_per_token(shape, 0) == 4096 * 32 * 1024
    w = Workload("llama-3.2-1b", 32, 128)
    assert mean_decode_context(w) == 32 + 64  # decode steps attend 33..159 positions
    f = floor_info(Workload("llama-3.2-1b", 0, 2), 4.57e12)
    assert f["floor_ms"] == pytest.approx(0.541, abs=0.002)


def test_row_statistics_and_failures_are_recorded():
    w = Workload("smollm2-135m", 32, 8)
    r = rows.finish(rows.new_row("hf-eager", w), [2.0, 1.0, 4.0], floor_ms=0.5)
    assert r["status"] == "ok" and r["ms_per_token"]["median"] == 2.0
    assert (r["ms_per_token"]["min"], r["ms_per_token"]["max"]) == (1.0, 4.0)
    assert r["tokens_per_s"] == 500.0 and r["pct_of_floor"] == 25.0

    def broken(row):
        raise ValueError("kernel said no")
    r = rows.run_guarded(rows.new_row("tiles-generate", w), broken)
    assert r["status"] == "failed" and "ValueError: kernel said no" in r["reason"]
    r = rows.run_guarded(rows.new_row("tiles-generate", w), lambda row: None)
    assert r["status"] == "failed" and "without a result" in r["reason"]
    with pytest.raises(ValueError, match="unknown system"):
        rows.new_row("vllm", w)


def _result():
    w = Workload("smollm2-135m", 32, 8)
    r = rows.finish(rows.new_row("tiles-op-multi", w), [1.0, 1.1, 0.9], floor_ms=0.5)
    s = rows.skip(rows.new_row("llama.cpp", w), "no build | here")
    return {"meta": {"date": "2026-11-30T00:00:00+00:00", "date_compact": "20261130-0000", "commit": "abc1234",
                     "device_name": "NVIDIA H200", "torch": "x", "transformers": "y", "mode": "gpu"},
            "bandwidth": {"bytes_per_s": 4.2e12, "tb_per_s": 4.2, "method": "torch.sum", "bytes": 4 << 30},
            "workloads": [{**w.to_dict(), "floor": floor_info(w, 4.2e12)}], "rows": [r, s], "sweep": []}


def test_markdown_table_and_file_names():
    res = _result()
    md = report.markdown(res)
    assert "4.20 TB/s" in md
    summary = next(x for x in md.splitlines() if x.startswith("| SmolLM2-135M, prompt 32 |"))
    assert "1.000 (50%)" in summary and "skipped" in summary  # median (% of floor); llama.cpp not run
    line = next(x for x in md.splitlines() if x.startswith("| Tiles op alone"))
    assert "**1.000**" in line and "0.900 - 1.100 (3)" in line
    skipped = next(x for x in md.splitlines() if x.startswith("| llama.cpp"))
    assert "skipped" in skipped and "no build / here" in skipped  # a '|' in a reason must not break the table
    assert report.base_name(res["meta"]) == "bench-20261130-0000-abc1234-nvidia-h200"


def test_commit_label_says_dirty_when_tracked_files_differ_from_head(tmp_path):
    """Results are named by the commit that produced them; a tree whose files are not HEAD's (edits, or a copy whose
    .git is older than its files) gets "-dirty", and a tree without git "unknown"."""
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    run("init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()
    (tmp_path / "untracked.txt").write_text("x\n")  # untracked files do not change what was measured
    assert report.git_commit(tmp_path) == head
    (tmp_path / "f.txt").write_text("b\n")
    assert report.git_commit(tmp_path) == head + "-dirty"
    bare = tmp_path.parent / (tmp_path.name + "-nogit")  # beside the repository, not inside it
    bare.mkdir()
    assert report.git_commit(bare) == "unknown"


def test_readme_block_is_added_then_replaced_in_place(tmp_path):
    res = _result()
    readme = tmp_path / "README.md"
    md = tmp_path / "docs" / "results" / "bench.md"
    figs = {"bars": tmp_path / "docs" / "results" / "bench-bars.png"}
    readme.write_text("# Tiles\n\n## Results\n\nIntro line.\n\n## Install\n\npip install .\n")
    assert report.update_readme(readme, res, figs, md)
    text = readme.read_text()
    assert text.index("Intro line.") < text.index(report.README_START) < text.index(report.README_END) \
        < text.index("## Install")
    assert "(docs/results/bench-bars.png)" in text and "[docs/results/bench.md]" in text
    res["rows"][0]["ms_per_token"]["median"] = 7.5
    assert report.update_readme(readme, res, figs, md)
    text2 = readme.read_text()
    assert text2.count(report.README_START) == 1 and "7.500 (50%)" in text2 and "1.000 (50%)" not in text2
    assert text2.split(report.README_START)[0] == text.split(report.README_START)[0]
    assert text2.split(report.README_END)[1] == text.split(report.README_END)[1]
    bare = tmp_path / "BARE.md"
    bare.write_text("# Tiles\n")
    assert report.update_readme(bare, res, figs, md)
    assert "## Results" in bare.read_text() and report.README_END in bare.read_text()
    assert not report.update_readme(tmp_path / "missing.md", res, figs, md)


# --------------------------------------------------------------------------- llama.cpp pieces


def test_gguf_export_round_trips_through_the_gguf_reader(tmp_path):
    gguf = pytest.importorskip("gguf")
    import numpy as np
    from tiles_ext import models
    from tiles_ext.bench.gguf_file import _permute_qk, write_gguf
    cfg = models.load_config("llama-3.2-1b")
    cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 128, 256
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size = 4, 2, 32, 512
    m = models.random_model(cfg)
    path = tmp_path / "m.gguf"
    size = write_gguf(m, path)
    assert size == path.stat().st_size
    r = gguf.GGUFReader(str(path))
    t = {x.name: x for x in r.tensors}
    assert "output.weight" not in t  # tied embeddings: llama.cpp reuses token_embd
    assert len(t) == 1 + 2 * 9 + 1 + 1  # embed, 9 per layer, final norm, llama3 rope factors
    assert list(t["blk.1.ffn_down.weight"].shape) == [256, 128]  # ggml order: columns first
    assert t["blk.0.attn_q.weight"].tensor_type.name == "BF16" and t["rope_freqs.weight"].tensor_type.name == "F32"
    assert t["blk.0.attn_norm.weight"].tensor_type.name == "F32"  # 1-D tensors in F32, as llama.cpp's converter

    def as_bf16(x, shape):
        return torch.from_numpy(np.array(x.data).view(np.int16).copy()).view(torch.bfloat16).reshape(shape)
    down = m.model.layers[1].mlp.down_proj.weight.detach()
    assert torch.equal(as_bf16(t["blk.1.ffn_down.weight"], down.shape), down)
    q = m.model.layers[0].self_attn.q_proj.weight.detach()
    got = as_bf16(t["blk.0.attn_q.weight"], q.shape)
    # llama.cpp's interleaved pairs: row 2i of a head is HF row i, row 2i+1 is HF row i + head_dim/2
    assert torch.equal(got[0], q[0]) and torch.equal(got[1], q[16]) and torch.equal(got[2], q[1])
    assert torch.equal(_permute_qk(q, 4).reshape(4, 16, 2, 128)[:, :, 1], q.reshape(4, 2, 16, 128)[:, 1])
    field = r.fields["llama.block_count"]
    assert int(field.parts[field.data[0]][0]) == 2


def test_llamacpp_row_is_skipped_with_a_reason_when_no_build_exists(tmp_path, monkeypatch):
    from tiles_ext.bench import llamacpp
    monkeypatch.setattr(llamacpp, "CARRY_DIR", tmp_path / "none")
    monkeypatch.setenv("PATH", str(tmp_path))
    w = Workload("smollm2-135m", 32, 8)
    r = {32: rows.new_row("llama.cpp", w)}
    llamacpp.llamacpp_rows(r, None, [w], {w.name: 1.0}, 5, torch.device("cuda"))
    assert r[32]["status"] == "skipped" and "sdist" in r[32]["reason"] and "64 MiB" in r[32]["reason"]
    nope = str(tmp_path / "nope")
    assert llamacpp.find_llama_bench(nope) == (None, f"--llama-bench {nope} is not a file")


def test_figures_and_from_json_rerender_with_readme(tmp_path):
    from tiles_ext.bench import __main__ as cli
    from tiles_ext.bench import figures
    res = _result()
    res["sweep"] = [{"system": s, "context": c, "status": "ok", "ms_per_token": v * (1 + c / 4096),
                     "floor_ms": 0.5 * (1 + c / 8192)}
                    for s, v in (("tiles-op-multi", 0.6), ("graph-step", 1.5)) for c in (32, 1024, 16384)]
    res["sweep"].append({"system": "graph-step", "context": 65536, "status": "failed", "reason": "oom"})
    figs = figures.write_all(res, tmp_path, "b")
    assert set(figs) == {"ms/token per system and workload", "ms/token against context length"}
    for p in figs.values():
        assert p.read_bytes()[:4] == b"\x89PNG"
    paths = report.write(res, tmp_path / "results", figs)
    readme = tmp_path / "README.md"
    readme.write_text("# Tiles\n\n## Results\n\n## Install\n")
    assert cli.main(["--from-json", str(paths["json"]), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "results/bench-20261130-0000-abc1234-nvidia-h200-context.png" in text
    assert "| Tiles op xN |" in text and "1.000 (50%)" in text  # the summary matrix
    md = (tmp_path / "results" / "bench-20261130-0000-abc1234-nvidia-h200.md").read_text()
    assert "| 16384 | " in md and "| 65536 | " in md  # the sweep table (a failed point does not break it)
    assert (tmp_path / "results" / "bench-20261130-0000-abc1234-nvidia-h200-bars.png").is_file()
