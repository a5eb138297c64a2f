"""Plan files: round trip, corruption refused, mismatches refused by kind, the plan cache."""
import logging
from dataclasses import replace

import numpy as np
import pytest

from tiles_ext.families import shape_of

from tiles_ext.planner import build_plan, format as fmt
from tiles_ext.planner import planfile
from tiles_ext.planner.plan import GpuTarget
from tiles_ext.planner.planfile import (PlanFileCorrupt, PlanMismatch, load_or_build, load_plan, save_plan)
from tiles_ext.planner.shape import ModelShape
from tiles_ext.planner.validate import PlanError

CFG = dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=64,
           intermediate_size=136, vocab_size=97, num_hidden_layers=2, rms_norm_eps=1e-6, tie_word_embeddings=True,
           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}, rope_theta=500000.0)
H200 = GpuTarget("NVIDIA H200", 132, 9, 0)
H100 = GpuTarget("NVIDIA H100 80GB HBM3", 132, 9, 0)


@pytest.fixture(scope="module")
def plan():
    return build_plan(CFG, 11, gpu=H200)


def same(a, b):
    assert a.header == b.header and a.shape == b.shape and a.gpu == b.gpu and a.policy == b.policy
    assert np.array_equal(a.to_blob(), b.to_blob())


def test_round_trip(plan, tmp_path):
    path = save_plan(plan, tmp_path / "p.tplan")
    back = load_plan(path, expect_shape=CFG, expect_gpu=H200)
    same(plan, back)
    assert back.tile_name(0) == "embed"


@pytest.mark.parametrize("where", ["magic", "header", "body", "digest", "last"])
def test_flipped_byte_is_refused(plan, tmp_path, where):
    path = save_plan(plan, tmp_path / "p.tplan")
    data = bytearray(path.read_bytes())
    hlen = int.from_bytes(data[12:16], "little")
    pos = {"magic": 0, "header": 16 + hlen // 2, "body": 16 + hlen + 1000, "digest": len(data) - 20,
           "last": len(data) - 1}[where]
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(PlanFileCorrupt, match="corrupted|not a Tiles plan file"):
        load_plan(path)


def test_truncated_and_foreign_files(plan, tmp_path):
    path = save_plan(plan, tmp_path / "p.tplan")
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(PlanFileCorrupt, match="checksum"):
        load_plan(path)
    path.write_bytes(b"{}")
    with pytest.raises(PlanFileCorrupt, match="not a Tiles plan file"):
        load_plan(path)


def test_other_config_refused(plan, tmp_path):
    path = save_plan(plan, tmp_path / "p.tplan")
    other = dict(CFG, intermediate_size=144)
    with pytest.raises(PlanMismatch, match="another model config.*intermediate: plan 136 vs model 144") as e:
        load_plan(path, expect_shape=other)
    assert e.value.kind == "config"


def test_other_gpu_refused(plan, tmp_path):
    path = save_plan(plan, tmp_path / "p.tplan")
    with pytest.raises(PlanMismatch, match="made for NVIDIA H200 .132 SMs.*this is NVIDIA H100") as e:
        load_plan(path, expect_gpu=H100)
    assert e.value.kind == "gpu"


def rewrite_header(path, **changes):
    """A file with an edited header and a *valid* checksum: what another tiles_ext version would write."""
    import json
    import hashlib
    data = path.read_bytes()
    hlen = int.from_bytes(data[12:16], "little")
    header = json.loads(data[16:16 + hlen])
    header.update(changes)
    h = json.dumps(header, sort_keys=True).encode()
    body = data[16 + hlen:-32]
    out = planfile._PREFIX.pack(planfile.FILE_MAGIC, planfile.PLANFILE_VERSION, len(h)) + h + body
    path.write_bytes(out + hashlib.sha256(out).digest())


@pytest.mark.parametrize("field,kind", [("abi_version", "abi"), ("format_version", "format")])
def test_other_abi_or_format_refused(plan, tmp_path, field, kind):
    path = save_plan(plan, tmp_path / "p.tplan")
    rewrite_header(path, **{field: getattr(fmt, field.upper()) + 1})
    with pytest.raises(PlanMismatch, match="rebuild the plan") as e:
        load_plan(path)
    assert e.value.kind == kind


def test_intact_but_invalid_plan_refused(plan, tmp_path):
    bad = build_plan(CFG, 11, gpu=H200)
    col = fmt.TILE.index("row_end")
    bad.tiles[1, col] += 1000
    path = save_plan(bad, tmp_path / "p.tplan")
    with pytest.raises(PlanError, match="invalid plan: tile 1 "):
        load_plan(path)


def test_shape_json_tampered_with_valid_checksum(plan, tmp_path):
    path = save_plan(plan, tmp_path / "p.tplan")
    shape = shape_of(CFG)
    rewrite_header(path, shape=dict(vars(replace(shape, eps=1e-5))))
    with pytest.raises(PlanFileCorrupt, match="recorded hash"):
        load_plan(path)


def test_cache_builds_then_reuses(tmp_path, monkeypatch):
    p1 = load_or_build(CFG, H200, 9, tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and "abi" in files[0].name
    monkeypatch.setattr(planfile, "build_plan", lambda *a, **k: pytest.fail("rebuilt a valid cached plan"))
    same(p1, load_or_build(CFG, H200, 9, tmp_path))


def test_cache_replans_after_a_planner_revision(tmp_path, monkeypatch):
    """A plan cached by an older planner (another PLAN_REVISION) is not reused: the new planner's plan is built and
    cached beside it, so an upgrade does not keep running the old, slower cut."""
    old = load_or_build(CFG, H200, 9, tmp_path)
    assert planfile.cache_path(tmp_path, old.shape, H200, 9, "tiles").name.endswith(f"-r{planfile.PLAN_REVISION}.tplan")
    monkeypatch.setattr(planfile, "PLAN_REVISION", planfile.PLAN_REVISION + 1)
    built = []
    monkeypatch.setattr(planfile, "build_plan", lambda *a, **k: built.append(1) or build_plan(*a, **k))
    same(old, load_or_build(CFG, H200, 9, tmp_path))
    assert built == [1] and len(list(tmp_path.iterdir())) == 2


def test_cache_replans_for_another_gpu(tmp_path, caplog):
    p = load_or_build(CFG, H200, 9, tmp_path)
    # Same cache path, GPU that differs only in what the file name does not encode.
    h200b = replace(H200, cc_minor=1)
    src = planfile.cache_path(tmp_path, p.shape, H200, 9, "tiles")
    src.rename(planfile.cache_path(tmp_path, p.shape, h200b, 9, "tiles"))
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        q = load_or_build(CFG, h200b, 9, tmp_path)
    assert q.gpu == h200b and "re-plan" in caplog.text
    same(q, load_plan(planfile.cache_path(tmp_path, p.shape, h200b, 9, "tiles"), expect_gpu=h200b))


def test_cache_rebuilds_corrupted_file(tmp_path, caplog):
    p = load_or_build(CFG, H200, 9, tmp_path)
    path = planfile.cache_path(tmp_path, p.shape, H200, 9, "tiles")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x80
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        q = load_or_build(CFG, H200, 9, tmp_path)
    assert "corrupted" in caplog.text and "re-planning" in caplog.text
    # The cache rebuilds the plan itself: its message does not also tell the user to do it.
    assert "delete it" not in caplog.text and "rebuild the plan" not in caplog.text
    same(p, q)
    same(p, load_plan(path))


@pytest.mark.parametrize("field,kind", [("abi_version", "abi"), ("format_version", "format")])
def test_cache_replans_other_abi_or_format_under_its_key(tmp_path, caplog, field, kind):
    p = load_or_build(CFG, H200, 9, tmp_path)
    path = planfile.cache_path(tmp_path, p.shape, H200, 9, "tiles")
    rewrite_header(path, **{field: getattr(fmt, field.upper()) + 1})
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        same(p, load_or_build(CFG, H200, 9, tmp_path))
    assert "re-planning" in caplog.text and "rebuild the plan" not in caplog.text
    same(p, load_plan(path))  # the file now holds the new plan


def test_cache_replans_a_plan_of_another_config_at_its_path(tmp_path, caplog):
    """A plan for another model config found at this config's cache path (a file copied there, a hash prefix
    shared by two configs) is re-planned and replaced, never fatal."""
    p = load_or_build(CFG, H200, 9, tmp_path)
    path = planfile.cache_path(tmp_path, p.shape, H200, 9, "tiles")
    other = build_plan(dict(CFG, intermediate_size=144), 9, gpu=H200)
    save_plan(other, path)
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        q = load_or_build(CFG, H200, 9, tmp_path)
    assert "another model config" in caplog.text and "re-planning" in caplog.text
    same(p, q)
    same(p, load_plan(path, expect_shape=CFG))


def test_cache_replans_a_plan_with_other_workers_at_its_path(tmp_path, caplog):
    p = load_or_build(CFG, H200, 9, tmp_path)
    save_plan(build_plan(CFG, 7, gpu=H200), planfile.cache_path(tmp_path, p.shape, H200, 9, "tiles"))
    with caplog.at_level(logging.WARNING, logger="tiles_ext.planner"):
        same(p, load_or_build(CFG, H200, 9, tmp_path))
    assert "7 workers" in caplog.text and "re-planning" in caplog.text


def test_cache_keys_differ(tmp_path):
    s = shape_of(CFG)
    keys = {planfile.cache_path(tmp_path, s, g, w, pol) for g in (H200, H100, GpuTarget())
            for w in (8, 9) for pol in ("tiles", "waves")}
    keys.add(planfile.cache_path(tmp_path, replace(s, vocab=98), H200, 9, "tiles"))
    assert len(keys) == 13
