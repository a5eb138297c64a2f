"""csrc/generated/plan_format.h agrees with planner/format.py, field by field."""
import re
from pathlib import Path

import pytest

from tiles_ext.planner import format as fmt

HEADER_H = Path(__file__).resolve().parent.parent / "csrc" / "generated" / "plan_format.h"


@pytest.fixture(scope="module")
def text():
    return HEADER_H.read_text()


def test_committed_header_is_rendered(text):
    assert text == fmt.render_header(), "run `python planner/format.py` and commit csrc/generated/plan_format.h"


@pytest.mark.parametrize("layout", fmt.LAYOUTS, ids=lambda l: l.name)
def test_struct_fields_in_order(text, layout):
    body = re.search(r"struct %s \{(.*?)\};" % layout.name, text, re.S)
    assert body, f"struct {layout.name} missing"
    fields = re.findall(r"int32_t (\w+)(?:\[(\d+)\])?;", body.group(1))
    assert [f for f, _ in fields] == [f for f, _ in layout.fields]
    assert [int(n or 1) for _, n in fields] == [layout.size(f) for f, _ in layout.fields]
    assert f"constexpr int32_t k{layout.name}Words = {layout.words};" in text


def constants(text):
    return {k: int(v, 0) for k, v in re.findall(r"constexpr int32_t (k\w+) = (-?(?:0x)?[0-9A-Fa-f]+);", text)}


def camel(name):
    return "".join(p.capitalize() for p in name.split("_"))


def test_enums_and_constants(text):
    c = constants(text)
    for enum_cls, prefix in ((fmt.Op, "kOp"), (fmt.DType, "kDType"), (fmt.StateWord, "kState"),
                             (fmt.ErrorCode, "kError"), (fmt.SampleMode, "kMode")):
        for m in enum_cls:
            assert c[prefix + camel(m.name)] == int(m)
    assert c["kMagic"] == fmt.MAGIC and c["kFormatVersion"] == fmt.FORMAT_VERSION
    assert c["kAbiVersion"] == fmt.ABI_VERSION and c["kMaxSteps"] == fmt.MAX_STEPS
    assert c["kCounterStrideWords"] == fmt.COUNTER_STRIDE_WORDS
    assert c["kStateHeaderWords"] == fmt.STATE_HEADER_WORDS
    for i, n in enumerate(fmt.SLOTS):
        assert c["kSlot" + camel(n)] == i


def test_partition_rule_matches_header_formula():
    # The C++ copy of attn_partition_range is rendered text; check the Python rule's invariants that it encodes.
    for n in range(1, 300, 7):
        for parts in (1, 3, 16):
            for gran in (1, 32):
                for single in (0, 64, 128):
                    ranges = [fmt.attn_partition_range(n, p, parts, gran, single) for p in range(parts)]
                    assert ranges[0][0] == 0 and ranges[-1][1] == n
                    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
                    if n <= single:
                        assert ranges[0] == (0, n)
