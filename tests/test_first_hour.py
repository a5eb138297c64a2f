"""A new user's first hour: what they meet on a fresh machine is true and names its fix.

- patch() on a model whose plan cache holds a plan of another config re-plans (never fails);
- the skip reasons of CUDA-only tests name the missing GPU;
- the installed Transformers is inside the range the requirements and the README state;
- the scripts use no TILES_* names of their own (those are the product's environment variables).
"""
from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent


def _tiny_model():
    from transformers import LlamaConfig

    from tiles_ext.models import random_model
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=64, num_hidden_layers=2, vocab_size=512, max_position_embeddings=256)
    return random_model(config, seed=3)


def test_patch_replans_when_the_cache_holds_another_config(tmp_path, caplog):
    """The cache file patch() looks for holds a plan of another config (copied in, or a shared hash prefix):
    patch re-plans and overwrites it, and the patched model decodes as one with a fresh cache."""
    import tiles_ext
    from tiles_ext.families import shape_of
    from tiles_ext.integrations.planning import CPU_WORKERS
    from tiles_ext.planner.plan import GpuTarget, build_plan
    from tiles_ext.planner.planfile import cache_path, load_plan, save_plan

    model = _tiny_model()
    shape = shape_of(model.config)
    path = cache_path(tmp_path, shape, GpuTarget(), CPU_WORKERS, "tiles")
    other = dict(model.config.to_dict(), intermediate_size=384)
    save_plan(build_plan(other, CPU_WORKERS), path)

    ids = torch.tensor([[1, 17, 42, 99]])
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        tiles_ext.patch(model, plan_cache_dir=tmp_path)
    assert "another model config" in caplog.text and "re-planning" in caplog.text
    assert load_plan(path, expect_shape=model.config).shape == shape
    got = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    tiles_ext.unpatch(model)

    fresh = _tiny_model()
    tiles_ext.patch(fresh, plan_cache_dir=tmp_path / "fresh")
    assert torch.equal(got, fresh.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip reasons of a machine without a CUDA GPU")
def test_cuda_only_tests_skip_because_there_is_no_gpu():
    files = [f"tests/{f.name}" for f in sorted((REPO / "tests").glob("test_cuda_*.py"))]
    assert files
    r = subprocess.run([sys.executable, "-P", "-m", "pytest", *files, "-q", "-rs", "-p", "no:cacheprovider"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    reasons = set(re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", r.stdout, re.MULTILINE))
    assert reasons == {"needs a CUDA GPU"}, reasons


def _requirement(name: str) -> str:
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if re.match(rf"{name}\b", line):
            return line[len(name):].strip()
    raise AssertionError(f"requirements.txt does not name {name}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text).groups(default="0"))


def test_installed_transformers_is_in_the_supported_range():
    """requirements.txt admits the newest 5.x (what a fresh install and CI get); the installed one is inside."""
    import transformers
    spec = _requirement("transformers")
    assert spec == ">=5.4,<6", f"requirements.txt: transformers{spec}; the README states >= 5.4, < 6"
    installed = _version(transformers.__version__)
    assert (5, 4) <= installed[:2] and installed[0] < 6, transformers.__version__
    from tiles_ext.integrations.version import MIN_TRANSFORMERS
    assert tuple(MIN_TRANSFORMERS) == (5, 4)


def test_readme_states_the_supported_range_and_tested_versions():
    text = (REPO / "README.md").read_text()
    assert "transformers >= 5.4,\n< 6" in text or "transformers >= 5.4, < 6" in text
    tested = re.search(r"transformers (\d+\.\d+\.\d+) \(on the H200[^)]*\) and (\d+\.\d+\.\d+) \(CPU, CI", text)
    assert tested, "README: the tested Transformers versions (GPU machine and CI) are not stated"
    gpu, ci = tested.groups()
    results = text[text.index("<!-- results:start -->"):text.index("<!-- results:end -->")]
    assert f"transformers {gpu}" in results, "the GPU version the README states is not the benchmark run's"
    assert _version(ci) >= _version(gpu)


def test_scripts_use_no_tiles_names_of_their_own():
    """TILES_* names are the product's environment variables (README); the scripts' own variables are plain."""
    product = {"TILES_CACHE", "TILES_FORCE_CPU", "TILES_WAIT_TIMEOUT_MS", "TILES_SYNC_CHECK"}
    for script in ("setup.sh", "main.sh", "test.sh"):
        text = (REPO / "scripts" / script).read_text()
        names = set(re.findall(r"TILES_[A-Z0-9_]+", text)) - product
        assert not names, f"scripts/{script} uses {sorted(names)}"
    assert (REPO / ".ci" / "run").read_text().strip().endswith("exec bash scripts/test.sh")
