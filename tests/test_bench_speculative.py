"""The benchmark's speculative-decoding rows: the shipped acceptance results and their loading, the arithmetic that
derives prompt lookup's and assisted generation's costs from verify-pass times, the verify-pass records (CPU
executor here; the CUDA test skips without a GPU), the --speculative settings, and the bench's sliding-window fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiles_ext.bench import report, report_speculative, speculative
from tiles_ext.bench.acceptance_tasks import TASKS
from tiles_ext.bench.speculative import assisted_rows, derive, load_acceptance, lookup_rows

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "docs" / "results" / "acceptance-smollm2-cpu.json"


def _acceptance(runs):
    """An acceptance result of one task with the given lookup runs (dicts of k, new_tokens, passes, rows)."""
    lookup = [{"k": k, "new_tokens": n, "passes": p, "decode_tokens_per_pass": (n - 1) / p,
               "rows_per_pass": rows, "equals_plain": True} for k, n, p, rows in runs]
    return {"meta": {"model": "m", "executor": "cpu", "commit": "c", "date": "d"},
            "tasks": [{"name": "rewrite", "lookup": lookup}]}


def _records(model, prompt, times):
    return [{"model": model, "prompt_len": prompt, "rows": r, "status": "ok", "ms_per_pass": {"median": t},
             "ratio_to_one_row": t / times[1], "bits_equal_one_row_passes": True} for r, t in times.items()]


# --------------------------------------------------------------------------- the shipped acceptance results


def test_shipped_acceptance_results_load_and_are_consistent():
    data = load_acceptance(SHIPPED)
    assert data["meta"]["executor"] == "cpu" and "SmolLM2-135M-Instruct" in data["meta"]["model"]
    assert data["meta"]["torch"] and data["meta"]["transformers"] and data["meta"]["commit"]
    assert [t["name"] for t in data["tasks"]] == [t.name for t in TASKS]
    for t in data["tasks"]:
        assert t["plain"]["passes"] == t["plain"]["new_tokens"] - 1  # one-row steps after the prefill's token
        assert [r["k"] for r in t["lookup"]] == [1, 3, 5, 7]
        for r in t["lookup"]:
            hist = {int(k): n for k, n in r["rows_per_pass"].items()}
            assert sum(hist.values()) == r["passes"] and max(hist) <= r["k"] + 1 <= 8
            assert r["decode_tokens_per_pass"] == pytest.approx((r["new_tokens"] - 1) / r["passes"])
            assert r["new_tokens"] == t["plain"]["new_tokens"] and r["equals_plain"], (t["name"], r["k"])


def test_acceptance_loading_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench.acceptance"):
        load_acceptance(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not an acceptance results file"):
        load_acceptance(bad)
    data = _acceptance([(3, 9, 4, {"4": 4})])
    del data["tasks"][0]["lookup"][0]["rows_per_pass"]
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="k=3 lacks rows_per_pass"):
        load_acceptance(bad)


# --------------------------------------------------------------------------- derived arithmetic


def test_prompt_lookup_rows_divide_the_pass_time_by_the_tokens_per_pass():
    times = {1: 1.0, 2: 2.0, 4: 2.5, 6: 3.5, 8: 4.0}
    acc = _acceptance([(1, 9, 4, {"2": 4}), (3, 9, 2, {"1": 1, "4": 1}), (5, 9, 2, {"6": 2}),
                       (7, 9, 1, {"8": 1})])
    rows = {r["k"]: r for r in lookup_rows(acc, times, "llama-3.2-1b", 32)}
    assert rows[1]["ms_per_token"] == pytest.approx(2.0 / 2) and rows[1]["speedup"] == pytest.approx(1.0)
    assert rows[3]["ms_per_token"] == pytest.approx(2.5 / 4)
    # billed by rows: one pass of 1 row and one of 4 rows for 8 decode tokens
    assert rows[3]["ms_per_token_by_rows"] == pytest.approx((1.0 + 2.5) / 8)
    assert rows[7]["ms_per_token"] == pytest.approx(4.0 / 8) and rows[7]["speedup"] == pytest.approx(2.0)
    assert [k for k, r in rows.items() if r["best_k"]] == [7]
    assert all(r["derivation"] == speculative.DERIVATION and "derived" in r["derivation"] for r in rows.values())


def test_prompt_lookup_row_without_its_pass_time_is_skipped():
    rows = lookup_rows(_acceptance([(3, 9, 2, {"4": 2}), (7, 9, 1, {"8": 1})]), {1: 1.0, 4: 2.0}, "m", 32)
    by_k = {r["k"]: r for r in rows}
    assert by_k[7]["status"] == "skipped" and "8 rows" in by_k[7]["reason"]
    assert by_k[3]["status"] == "ok" and by_k[3]["best_k"]


def test_assisted_rows_cost_a_round_and_its_break_even():
    draft = {1: 1.0}
    target = {1: 5.0, 2: 8.0, 3: 9.0, 4: 10.0, 8: 15.0}
    rows = {r["k"]: r for r in assisted_rows(draft, target, 32, ks=(1, 3, 7))}
    assert rows[1]["round_ms"] == pytest.approx(1.0 + 8.0)
    assert rows[1]["break_even_tokens_per_round"] == pytest.approx(9.0 / 5.0)
    assert rows[1]["break_even_accepted_drafts"] == pytest.approx(0.8) and rows[1]["reachable"]
    assert rows[3]["break_even_tokens_per_round"] == pytest.approx((3 + 10.0) / 5.0)
    assert rows[7]["break_even_tokens_per_round"] == pytest.approx((7 + 15.0) / 5.0)
    assert rows[7]["break_even_acceptance_rate"] == pytest.approx((22 / 5 - 1) / 7)
    slow = assisted_rows({1: 4.0}, target, 32, ks=(7,))[0]
    assert slow["break_even_tokens_per_round"] > 8 and not slow["reachable"]


def test_derive_pairs_the_draft_and_target_by_prompt_and_the_markdown_labels_them():
    recs = (_records("llama-3.2-1b", 32, {r: 1.0 + 0.4 * (r - 1) for r in range(1, 9)})
            + _records("llama-3.1-8b", 32, {r: 5.0 + 1.2 * (r - 1) for r in range(1, 9)})
            + _records("llama-3.1-8b", 4096, {r: 6.0 for r in range(1, 9)}))
    acc = _acceptance([(3, 9, 2, {"4": 2})])
    out = derive(recs, acc)
    assert {(r["model"], r["prompt_len"]) for r in out["lookup"]} == {("llama-3.2-1b", 32), ("llama-3.1-8b", 32),
                                                                        ("llama-3.1-8b", 4096)}
    assert {r["prompt_len"] for r in out["assisted"]} == {32} and len(out["assisted"]) == 7
    result = {"meta": {"date": "d", "device_name": "gpu", "commit": "c", "torch": "t", "transformers": "x",
                       "mode": "gpu"}, "bandwidth": {"bytes_per_s": 3e12, "method": "m", "bytes": 1e9},
              "workloads": [], "rows": [], "verify_passes": recs,
              "speculative": {**out, "acceptance": {"path": "p", "model": "m", "executor": "cpu", "commit": "c"}}}
    md = report.markdown(result)
    assert "ms/token, median" not in md  # no per-workload rows: no summary table
    assert "Verify passes (measured)" in md and "| Llama-3.1-8B, prompt 4096 |" in md
    recs[0].update(bits_equal_one_row_passes=False, rel_err_vs_one_row_passes=3e-4)
    assert "no, rel. error R=1 3.0e-04" in "\n".join(report_speculative.pass_table(recs))
    assert "derived: measured R-row pass time x CPU-measured acceptance" in md
    assert "Assisted generation, Llama-3.2-1B-shaped draft for a Llama-3.1-8B-shaped target" in md
    assert "Best k per task" in md and "| Llama-3.1-8B, prompt 32 | rewrite | 3 |" in md


# --------------------------------------------------------------------------- verify passes and settings


def test_verify_pass_records_on_the_cpu_executor():
    from integration_support import tiny_config
    from tiles_ext.bench.verify_passes import pass_rows
    from tiles_ext.models import random_model
    model = random_model(tiny_config(), seed=0)
    seen = []
    recs = pass_rows(model, "tiny", 40, torch.device("cpu"), rows=(2, 5), launches=1, reps=2, emit=seen.append)
    assert [r["rows"] for r in recs] == [1, 2, 5] and seen == recs  # R = 1, the ratios' base, always first
    assert all(r["status"] == "ok" and r["bits_equal_one_row_passes"] for r in recs)  # the CPU executor's rows
    assert all(r["rel_err_vs_one_row_passes"] == 0.0 for r in recs)
    assert recs[0]["ratio_to_one_row"] == 1.0 and recs[0]["ms_per_pass"]["reps"] == 2
    assert recs[2]["ratio_to_one_row"] == pytest.approx(recs[2]["ms_per_pass"]["median"] / recs[0]["ms_per_row"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_verify_pass_records_on_cuda():
    from tiles_ext.bench.verify_passes import pass_rows
    from tiles_ext.models import random_model
    model = random_model("smollm2-135m", device="cuda", seed=0)
    recs = pass_rows(model, "smollm2-135m", 32, torch.device("cuda"), rows=(1, 2, 8), launches=3, reps=2)
    assert [r["rows"] for r in recs] == [1, 2, 8]
    # The pass's logits follow one-row passes' (bit-equal, or within a faster kernel's rounding).
    assert all(r["status"] == "ok" and r["rel_err_vs_one_row_passes"] < 1e-2 for r in recs), recs


def test_speculative_flag_runs_the_verify_passes_alone_or_beside_other_systems():
    from tiles_ext.bench.__main__ import VERIFY, parse, settings
    s = settings(parse(["--quick", "--speculative"]))
    assert s["systems"] == [VERIFY] and s["child_timeout_s"] == pytest.approx(0.9 * s["budget_s"])
    s = settings(parse(["--quick", "--speculative", "--systems", "hf-eager"]))
    assert s["systems"] == ["hf-eager", VERIFY] and s["child_timeout_s"] == pytest.approx(0.6 * s["budget_s"])
    assert VERIFY not in settings(parse(["--quick"]))["systems"]


def test_missing_verify_records_and_acceptance_say_why(tmp_path):
    from tiles_ext.bench.__main__ import speculative_results
    s = {"models": ["llama-3.2-1b"], "prompts": [32], "acceptance": str(tmp_path / "none.json")}
    out = speculative_results(s, _records("llama-3.2-1b", 32, {1: 1.0, 2: 1.5}), {"llama-3.2-1b": "it hung"}, None)
    missing = [r for r in out["verify_passes"] if r["status"] == "skipped"]
    assert [r["rows"] for r in missing] == [3, 4, 5, 6, 7, 8] and all(r["reason"] == "it hung" for r in missing)
    assert "bench.acceptance" in out["speculative"]["acceptance"]["problem"] and out["speculative"]["lookup"] == []


def test_help_documents_the_speculative_run():
    p = subprocess.run([sys.executable, "-m", "tiles_ext.bench", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0 and "--speculative" in p.stdout and "tiles-op-rows" in p.stdout


# --------------------------------------------------------------------------- the sliding-window fix


def test_the_bench_opens_a_window_its_sequences_fit_and_keeps_one_they_outgrow():
    import tiles_ext
    from transformers import Phi3Config
    from tiles_ext.bench.workloads import open_window
    from tiles_ext.models import random_model
    from tiles_ext.planner.shape import UnsupportedConfig
    config = Phi3Config(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                        num_hidden_layers=2, vocab_size=512, max_position_embeddings=512, sliding_window=200,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    outgrown = random_model(config, seed=0)
    assert open_window(outgrown, 300) is None and outgrown.config.sliding_window == 200
    with pytest.raises(UnsupportedConfig, match="sliding_window 200"):
        tiles_ext.patch(outgrown, plan_cache_dir=False)
    fits = random_model(config, seed=0)
    ids = torch.randint(3, 500, (1, 40), generator=torch.Generator().manual_seed(0))
    windowed = fits.generate(ids, max_new_tokens=6, do_sample=False)
    note = open_window(fits, 150)
    assert fits.config.sliding_window is None and "sliding_window 200 set to None" in note and "150" in note
    patched = tiles_ext.patch(fits, plan_cache_dir=False)
    assert torch.equal(patched.generate(ids, max_new_tokens=6, do_sample=False), windowed)  # within the window
    tiles_ext.unpatch(patched)
    assert open_window(fits, 150) is None  # nothing left to open


@pytest.mark.slow
def test_quick_speculative_run_end_to_end(tmp_path, default_model):
    """--quick --speculative on the CPU executor: the child's verify passes of the real SmolLM2 (the fixture: skipped
    where the model package is absent, the GPU machine), the derived rows from the shipped acceptance, JSON and
    markdown (~15 s)."""
    p = subprocess.run([sys.executable, "-m", "tiles_ext.bench", "--quick", "--speculative", "--prompts", "16",
                        "--reps", "1", "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (jp,) = tmp_path.glob("bench-*.json")
    result = json.loads(jp.read_text())
    assert result["rows"] == [] and [r["rows"] for r in result["verify_passes"]] == list(range(1, 9))
    assert all(r["status"] == "ok" and r["bits_equal_one_row_passes"] for r in result["verify_passes"])
    lookup = result["speculative"]["lookup"]
    assert len(lookup) == len(TASKS) * 4 and all(r["status"] == "ok" for r in lookup)
    assert sum(r["best_k"] for r in lookup) == len(TASKS)
    md = next(tmp_path.glob("bench-*.md")).read_text()
    assert "Verify passes (measured)" in md and speculative.DERIVATION in md
    readme = tmp_path / "README.md"
    readme.write_text("# R\n\n## Results\n\nold\n")
    p = subprocess.run([sys.executable, "-m", "tiles_ext.bench", "--from-json", str(jp), "--out", str(tmp_path / "re"),
                        "--readme", str(readme)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "left as it is" in p.stdout, p.stdout + p.stderr
    assert readme.read_text() == "# R\n\n## Results\n\nold\n"  # a verify-pass run has no results block to show
    assert "Verify passes (measured)" in next((tmp_path / "re").glob("bench-*.md")).read_text()


def test_the_window_opens_for_the_workloads_that_fit_and_the_others_say_why():
    from transformers import Phi3Config
    from tiles_ext.bench.workloads import Workload, open_window_for
    from tiles_ext.models import random_model
    config = Phi3Config(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                        num_hidden_layers=2, vocab_size=512, max_position_embeddings=512, sliding_window=200,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = random_model(config, seed=0)
    short, mid, long_ = (Workload("phi-3-mini-4k", p, 16) for p in (32, 150, 256))
    note, outgrown = open_window_for(model, [short, mid, long_])
    assert model.config.sliding_window is None and "167 positions" in note
    assert list(outgrown) == [long_.name] and "273 positions" in outgrown[long_.name]
    assert open_window_for(random_model(config, seed=0), [long_]) == (None, {})


def test_the_bit_column_says_yes_only_where_passes_of_several_rows_ran():
    from tiles_ext.bench.report_speculative import pass_table
    skipped = [{"model": "smollm2-135m", "prompt_len": 16, "rows": r, "status": "skipped", "reason": "child exited"}
               for r in (1, 2, 8)]
    (line,) = [l for l in pass_table(skipped) if l.startswith("| SmolLM2")]
    assert line.endswith("| - (no pass of several rows ran) |")
    ran = _records("llama-3.2-1b", 32, {1: 1.0, 2: 1.5})
    (line,) = [l for l in pass_table(ran) if l.startswith("| Llama")]
    assert line.endswith("| yes |")
