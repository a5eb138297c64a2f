"""python -m tiles_ext.plan build / check."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiles_ext.plan import main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_build_and_check(tmp_path, capsys):
    out = tmp_path / "smol.tplan"
    assert main(["build", "--config", str(CONFIGS / "smollm2-135m-config.json"), "--workers", "17", "--out",
                 str(out), "--gpu-name", "Test GPU", "--sm-count", "17", "--cc", "9.0"]) == 0
    text = capsys.readouterr().out
    for word in ("tiles per operator", "dependency depth", "imbalance", "L0-29.gateup", "predicted (tiles",
                 "predicted (waves", f"wrote {out}"):
        assert word in text
    assert main(["check", str(out), "--config", str(CONFIGS / "smollm2-135m-config.json")]) == 0
    assert "valid plan" in capsys.readouterr().out


def test_model_dir_and_check_refusals(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    cfg = json.loads((CONFIGS / "smollm2-135m-config.json").read_text())
    cfg["num_hidden_layers"] = 2
    (model / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "p.tplan"
    assert main(["build", "--model", str(model), "--workers", "5", "--out", str(out), "--policy", "waves"]) == 0
    capsys.readouterr()
    # another config
    assert main(["check", str(out), "--config", str(CONFIGS / "smollm2-135m-config.json")]) == 1
    assert "config mismatch" in capsys.readouterr().err
    # flipped byte
    data = bytearray(out.read_bytes())
    data[len(data) // 3] ^= 4
    out.write_bytes(bytes(data))
    assert main(["check", str(out)]) == 1
    assert "corrupted" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing.tplan")]) == 2
    assert "no plan file" in capsys.readouterr().err


def _refused(capsys, argv, status=2):
    """main(argv) refuses with one `error: ...` line on stderr and no traceback; returns that line."""
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 4,
                               "intermediate_size": 256, "vocab_size": 10, "num_hidden_layers": 1}))
    assert "head_dim 25" in _refused(capsys, ["build", "--config", str(bad), "--workers", "3", "--out",
                                              str(tmp_path / "x")])


SMOL = json.loads((CONFIGS / "smollm2-135m-config.json").read_text())


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                                   "num_hidden_layers"])
def test_incomplete_config_names_the_missing_field(tmp_path, capsys, field):
    cfg = {k: v for k, v in SMOL.items() if k != field}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    err = _refused(capsys, ["build", "--config", str(tmp_path / "c.json"), "--workers", "3", "--out",
                            str(tmp_path / "p.tplan")])
    assert f"no '{field}'" in err and str(tmp_path / "c.json") in err, err
    assert not (tmp_path / "p.tplan").exists()


@pytest.mark.parametrize("content,expect", [
    ({"hidden_size": 576}, 'has no "model_type"'),
    ([1, 2], "not a model config object"),
    ({"model_type": "bert", "hidden_size": 8}, "model_type 'bert' is not supported"),
    (dict(SMOL, num_key_value_heads=[3]), "cannot read this config"),
    ({**{k: v for k, v in SMOL.items() if k != "head_dim"}, "num_attention_heads": 0}, "cannot read this config"),
])
def test_malformed_config_is_a_clear_error(tmp_path, capsys, content, expect):
    (tmp_path / "c.json").write_text(json.dumps(content))
    err = _refused(capsys, ["build", "--config", str(tmp_path / "c.json"), "--workers", "3", "--out",
                            str(tmp_path / "p.tplan")])
    assert expect in err, err


def test_config_paths_of_the_wrong_kind(tmp_path, capsys):
    assert "is a directory; give its config.json" in _refused(
        capsys, ["build", "--config", str(tmp_path), "--workers", "3", "--out", str(tmp_path / "p.tplan")])
    (tmp_path / "c.json").write_text("{not json")
    assert "is not valid JSON" in _refused(
        capsys, ["build", "--config", str(tmp_path / "c.json"), "--workers", "3", "--out", str(tmp_path / "p")])
    assert "is a file; give the checkpoint folder" in _refused(
        capsys, ["build", "--model", str(tmp_path / "c.json"), "--workers", "3", "--out", str(tmp_path / "p")])
    assert "no config file" in _refused(
        capsys, ["build", "--model", str(tmp_path / "none"), "--workers", "3", "--out", str(tmp_path / "p")])


def test_check_on_a_directory_names_its_plans(tmp_path, capsys):
    err = _refused(capsys, ["check", str(tmp_path)])
    assert "is a directory, not a plan file" in err and "e.g." not in err
    assert main(["build", "--config", str(CONFIGS / "smollm2-135m-config.json"), "--workers", "2", "--out",
                 str(tmp_path / "a.tplan")]) == 0
    capsys.readouterr()
    assert f"e.g. {tmp_path / 'a.tplan'}" in _refused(capsys, ["check", str(tmp_path)])


def _no_planning(monkeypatch):
    import tiles_ext.plan as cli
    monkeypatch.setattr(cli, "build_plan", lambda *a, **k: pytest.fail("planned before refusing the output"))


def test_unwritable_out_is_refused_before_planning(tmp_path, capsys, monkeypatch):
    _no_planning(monkeypatch)
    cfg = ["build", "--config", str(CONFIGS / "smollm2-135m-config.json"), "--workers", "4"]
    (tmp_path / "file").write_text("x")
    assert "is a file, not a folder" in _refused(capsys, cfg + ["--out", str(tmp_path / "file" / "sub" / "p")])
    assert "is a directory; give a file name" in _refused(capsys, cfg + ["--out", str(tmp_path)])
    assert "--out is empty" in _refused(capsys, cfg + ["--out", ""])

    import tiles_ext.plan as cli

    def no_mkdir(self, *a, **k):
        raise PermissionError(13, "Permission denied")
    with monkeypatch.context() as m:
        m.setattr(Path, "mkdir", no_mkdir)  # a folder that may not be created (even as root)
        err = _refused(capsys, cfg + ["--out", str(tmp_path / "new" / "p.tplan")])
    assert "cannot create the folder" in err and "writable folder" in err, err

    def no_write(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(cli.tempfile, "mkstemp", no_write)  # a folder this process may not write (even as root)
    err = _refused(capsys, cfg + ["--out", str(tmp_path / "p.tplan")])
    assert "cannot write in" in err and "Permission denied" in err and "writable folder" in err, err


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="needs a non-root user (root may write into any folder)")
def test_read_only_folder_is_refused_before_planning(tmp_path, capsys, monkeypatch):
    _no_planning(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        for out in (ro / "p.tplan", ro / "sub" / "p.tplan"):
            assert "writable folder" in _refused(capsys, ["build", "--config", str(CONFIGS / "smollm2-135m-config.json"),
                                                          "--workers", "4", "--out", str(out)])
    finally:
        ro.chmod(0o700)


def test_out_folders_are_created(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "p.tplan"
    assert main(["build", "--config", str(CONFIGS / "smollm2-135m-config.json"), "--workers", "2", "--out",
                 str(out)]) == 0
    assert out.is_file() and f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize("argv,expect", [
    (["--workers", "100000"], "--workers 100000: must be between 1 and 1024"),
    (["--workers", "0"], "--workers 0: must be between 1 and 1024"),
    (["--workers", "-3"], "--workers -3: must be between 1 and 1024"),
    (["--sm-count", "5000"], "--sm-count 5000: must be between 1 and 1024"),
    (["--workers", "4", "--context", "0"], "--context 0: must be between 1"),
    (["--workers", "4", "--attn-partitions", "0"], "--attn-partitions 0: must be between 1"),
    (["--workers", "4", "--bandwidth", "0"], "--bandwidth 0.0: must be positive"),
])
def test_absurd_counts_are_refused_at_once(tmp_path, capsys, monkeypatch, argv, expect):
    _no_planning(monkeypatch)
    err = _refused(capsys, ["build", "--config", str(CONFIGS / "smollm2-135m-config.json"), "--out",
                            str(tmp_path / "p.tplan")] + argv)
    assert expect in err, err
    if "--workers" in argv[0] and "100000" in argv:
        assert "one SM" in err


def test_the_largest_worker_count_plans():
    """The bound is a real limit, not a guess: a plan at MAX_WORKERS builds and validates (in seconds)."""
    from tiles_ext.plan import MAX_WORKERS
    from tiles_ext.planner.plan import build_plan
    plan = build_plan(SMOL, MAX_WORKERS)
    assert plan.num_workers == MAX_WORKERS


def test_module_entry_point_exit_code(tmp_path):
    bad = tmp_path / "bad.tplan"
    bad.write_bytes(b"TILEPLAN" + b"\0" * 64)
    r = subprocess.run([sys.executable, "-m", "tiles_ext.plan", "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "corrupted" in r.stderr
