"""The FP8 weight formats in the plan format: scale layouts, byte counts, the weight table and the header."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.families import shape_of
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import SCALE_SLOTS, SLOT, DType, ScaleLayout, matrix_bytes, scale_shape
from tiles_ext.planner.plan import build_plan
from tiles_ext.planner.shape import UnsupportedConfig
from tiles_ext.planner.weights import WeightLayout

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def smollm2(weight_format="bf16"):
    shape = shape_of(json.loads((CONFIGS / "smollm2-135m-config.json").read_text()))
    return dataclasses.replace(shape, weight_format=weight_format)


def test_scale_shapes():
    assert scale_shape(ScaleLayout.PER_CHANNEL, 1536, 576) == (1536, 0)
    assert scale_shape(ScaleLayout.BLOCK128, 1536, 576) == (12, 5)   # 576 = 4.5 blocks: the edge block is partial
    with pytest.raises(ValueError, match="no scale tensor"):
        scale_shape(ScaleLayout.NONE, 4, 4)


def test_matrix_bytes_count_one_byte_per_element_plus_scales():
    assert matrix_bytes(ScaleLayout.NONE, 0, 10, 576) == 10 * 576 * 2
    assert matrix_bytes(ScaleLayout.PER_CHANNEL, 3, 13, 576) == 10 * 576 + 10 * 4
    # rows 120..136 touch block rows 0 and 1, each of 5 block columns
    assert matrix_bytes(ScaleLayout.BLOCK128, 120, 136, 576) == 16 * 576 + 2 * 5 * 4
    assert matrix_bytes(ScaleLayout.BLOCK128, 0, 128, 576) == 128 * 576 + 5 * 4


@pytest.mark.parametrize("weight_format", ["fp8", "fp8_block128"])
def test_fp8_plans(weight_format):
    """An FP8 shape's plan validates, its header names the format, every layer has the seven scale slots with
    their layout's shapes, and its matvec tiles stream about half the bytes of the BF16 plan's."""
    shape, bf16 = smollm2(weight_format), smollm2()
    plan = build_plan(shape, 16)
    dtype, layout = fmt.WEIGHT_FORMATS[weight_format]
    assert (plan.header["weight_dtype"], plan.header["scale_layout"]) == (int(dtype), int(layout))
    table = plan.weights
    for slot, matrix in SCALE_SLOTS.items():
        rows = [r for r in table.tolist() if r[0] == SLOT[slot]]
        assert len(rows) == shape.num_layers
        m_rows, m_cols = fmt.slot_shape(matrix, shape)
        assert tuple(rows[0][2:]) == scale_shape(layout, m_rows, m_cols)
    assert len(WeightLayout(shape)) == len(WeightLayout(bf16)) + 7 * shape.num_layers
    op = np.asarray(plan.tiles)[:, fmt.TILE.index("op")]
    nbytes = np.asarray(plan.tiles)[:, fmt.TILE.index("weight_bytes")]
    ref = np.asarray(build_plan(bf16, 16).tiles)
    matvec = np.isin(op, [fmt.Op.QKV, fmt.Op.RESID, fmt.Op.GATEUP])
    ratio = nbytes[matvec].sum() / ref[np.isin(ref[:, 0], [fmt.Op.QKV, fmt.Op.RESID, fmt.Op.GATEUP]),
                                       fmt.TILE.index("weight_bytes")].sum()
    assert 0.5 < ratio < 0.51
    assert shape.weight_bytes() < 0.61 * bf16.weight_bytes()   # the BF16 tied embedding / LM head stays


def test_bf16_shape_hash_unchanged_by_the_format_field():
    """weight_format 'bf16' is not written into the shape's JSON: existing plan caches keep their keys."""
    assert "weight_format" not in smollm2().to_json()
    assert smollm2().config_hash() != smollm2("fp8").config_hash() != smollm2("fp8_block128").config_hash()


def test_unknown_weight_format_is_refused_by_name():
    with pytest.raises(UnsupportedConfig, match="'int4' is not served; the formats are 'bf16', 'fp8', 'fp8_block128'"):
        smollm2("int4")


def test_e4m3_dtype_code():
    assert fmt.DTYPE_BYTES[DType.F8E4M3] == 1 and fmt.FP8_E4M3_MAX == 448.0
