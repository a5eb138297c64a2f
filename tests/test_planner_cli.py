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


def test_bad_config_is_a_clear_error(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 4,
                               "intermediate_size": 256, "vocab_size": 10, "num_hidden_layers": 1}))
    with pytest.raises(SystemExit, match="head_dim 25"):
        main(["build", "--config", str(bad), "--workers", "3", "--out", str(tmp_path / "x")])


def test_module_entry_point_exit_code(tmp_path):
    bad = tmp_path / "bad.tplan"
    bad.write_bytes(b"TILEPLAN" + b"\0" * 64)
    r = subprocess.run([sys.executable, "-m", "tiles_ext.plan", "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "corrupted" in r.stderr
