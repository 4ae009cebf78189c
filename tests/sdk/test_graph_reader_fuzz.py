"""The C graph reader (plugin_sdk/include/hipdnn_plugin_sdk/GraphReader.h).

Positive: its view of real graphs equals the Python side's, field by field.
Negative: every truncation and thousands of mutations of those graphs, run under AddressSanitizer and
UndefinedBehaviorSanitizer, never crash, never read out of bounds, and whatever the reader accepts it
reads exactly as the Python FlatBuffers runtime does.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.support import SANITIZER_ENV, build_driver, frontend_graphs, seed_buffers, write_records
from tests.sdk.wire_view import same, wire_view

MUTATIONS_PER_SEED = 8000


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(tmp_path_factory.mktemp("reader_driver"))


def run_driver(exe: Path, buffers: list[bytes], tmp: Path, dump: bool) -> subprocess.CompletedProcess[str]:
    records = tmp / "records.bin"
    write_records(records, buffers)
    args = [str(exe), str(records)] + (["dump"] if dump else [])
    result = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **SANITIZER_ENV}, timeout=120)
    assert result.returncode == 0, f"driver exited {result.returncode}\n{result.stderr[-4000:]}"
    for marker in ("AddressSanitizer", "runtime error", "UndefinedBehaviorSanitizer", "check failed"):
        assert marker not in result.stderr, result.stderr[-4000:]
    return result


def dump(exe: Path, buffers: list[bytes], tmp: Path) -> list[dict[str, Any]]:
    out = run_driver(exe, buffers, tmp, dump=True).stdout.splitlines()
    assert len(out) == len(buffers)
    return [json.loads(line) for line in out]


# -- positive ---------------------------------------------------------------------------------


def test_reader_view_equals_python_wire_view(driver: Path, tmp_path: Path) -> None:
    seeds = seed_buffers()
    for (name, buf), view in zip(seeds.items(), dump(driver, list(seeds.values()), tmp_path), strict=True):
        assert view["ok"] == 1, name
        assert same(view, wire_view(buf)), f"{name}:\nC:  {view}\nPy: {wire_view(buf)}"


def test_reader_view_equals_frontend_graph(driver: Path, tmp_path: Path) -> None:
    graphs = frontend_graphs()
    views = dump(driver, [g.serialize() for g in graphs.values()], tmp_path)
    for (name, g), view in zip(graphs.items(), views, strict=True):
        assert bytes.fromhex(view["name"]).decode() == g.name
        assert view["override"] == int(g.is_override_shape_enabled())
        assert view["preferred_engine_id"] == g.preferred_engine_id
        assert view["io_data_type"] == int(g.io_data_type)
        assert len(view["tensors"]) == len(g.tensors), name
        for t, vt in zip(g.tensors, view["tensors"], strict=True):
            assert vt["uid"] == t.get_uid()
            assert bytes.fromhex(vt["name"]).decode() == t.get_name()
            assert vt["dims"] == list(t.get_dim()) and vt["strides"] == list(t.get_stride())
            assert vt["data_type"] == int(t.get_data_type())
            assert vt["virtual"] == int(t.get_is_virtual())
        assert [bytes.fromhex(n["name"]).decode() for n in view["nodes"]] == [n.name for n in g.nodes]


def test_sdpa_attributes_read_back(driver: Path, tmp_path: Path) -> None:
    g = frontend_graphs()["sdpa_full"]
    (view,) = dump(driver, [g.serialize()], tmp_path)
    uid = {t.get_name(): t.get_uid() for t in g.tensors}
    (node,) = view["nodes"]
    assert node["op_type"] == 12
    s = node["sdpa"]
    assert (s["q"], s["k"], s["v"], s["o"]) == (uid["q"], uid["k"], uid["v"], uid["attention::O"])
    assert s["stats"] == uid["attention::Stats"] and s["generate_stats"] == 1
    assert s["attn_mask"] == uid["bias"] and s["scale"] is None
    assert s["seq_len_q"] == uid["seq_q"] and s["seq_len_kv"] == uid["seq_kv"]
    assert s["attn_scale_value"] == struct.unpack("<I", struct.pack("<f", 0.3))[0]
    assert (s["causal_mask"], s["causal_mask_bottom_right"], s["padding_mask"], s["alibi_mask"]) == (
        1,
        0,
        1,
        1,
    )
    assert (s["left_bound"], s["right_bound"], s["diagonal_alignment"]) == (5, 0, 0)

    g2 = frontend_graphs()["sdpa_bottom_right"]
    (view2,) = dump(driver, [g2.serialize()], tmp_path)
    s2 = view2["nodes"][0]["sdpa"]
    uid2 = {t.get_name(): t.get_uid() for t in g2.tensors}
    assert s2["scale"] == uid2["scale"] and s2["attn_scale_value"] is None
    assert (s2["causal_mask"], s2["causal_mask_bottom_right"], s2["diagonal_alignment"]) == (0, 1, 1)
    assert s2["stats"] is None and s2["generate_stats"] == 0
    assert (s2["k"], s2["v"]) == (2**40, -5)
    assert view2["preferred_engine_id"] == 101 and view2["override"] == 1


def test_appended_fields_and_unknown_kinds(driver: Path, tmp_path: Path) -> None:
    """A newer writer's buffer opens: appended fields are ignored, unknown node kinds are reported by
    id, fields never stored read as their schema defaults."""
    seeds = seed_buffers()
    (view,) = dump(driver, [seeds["future"]], tmp_path)
    assert view["ok"] == 1 and view["override"] == 1 and view["io_data_type"] == 2
    assert view["preferred_engine_id"] is None and view["compute_data_type"] == 0
    t0, t1 = view["tensors"]
    assert (t0["uid"], t0["dims"], t0["strides"], t0["data_type"]) == (7, [4, 1], [1, 1], 4)
    assert t0["dynamic"] == 1 and t0["ragged"] == 0
    assert t0["value"]["type"] == 6 and t0["value"]["int64"] == 2
    assert t0["value"]["double_bits"] == struct.unpack("<Q", struct.pack("<d", 2.5))[0]
    assert t1 == {
        "uid": 0,
        "name": "",
        "data_type": 0,
        "virtual": 0,
        "dynamic": 0,
        "dims": [],
        "strides": [],
        "ragged": None,
        "value": None,
    }
    mystery, swish = view["nodes"]
    assert mystery["op_type"] == 5 and set(mystery) == {"name", "compute_data_type", "op_type"}
    pw = swish["pointwise"]
    assert (pw["mode"], pw["in_0"], pw["out_0"], pw["in_1"]) == (44, 7, 0, None)
    assert pw["swish_beta"] == struct.unpack("<I", struct.pack("<f", 1.5))[0]


def test_cplusplus_build_reads_the_same(driver: Path, tmp_path: Path) -> None:
    cpp = build_driver(tmp_path, sanitize=False, cplusplus=True)
    buffers = list(seed_buffers().values()) + list(truncations(seed_buffers()["sdpa_full"]))[::37]
    assert run_driver(cpp, buffers, tmp_path, dump=True).stdout == run_driver(driver, buffers, tmp_path, True).stdout


# -- negative ---------------------------------------------------------------------------------

INTERESTING_U32 = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    0x7F,
    0xFF,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    0xFFFFFFFC,
    0xFFFFFFF8,
]
INTERESTING_U16 = [0, 1, 2, 3, 4, 5, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE]


def truncations(buf: bytes) -> Iterator[bytes]:
    for n in range(len(buf)):
        yield buf[:n]


def mutate(buf: bytes, rng: random.Random) -> bytes:
    b = bytearray(buf)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        kind = rng.randrange(8)
        if not b:
            b.extend(rng.randbytes(4))
        pos = rng.randrange(len(b))
        if kind == 0:  # flip a bit
            b[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a random byte
            b[pos] = rng.randrange(256)
        elif kind == 2 and len(b) >= 4:  # an offset-sized word with an interesting value
            pos = rng.randrange(0, len(b) - 3) & ~3 if rng.random() < 0.8 else rng.randrange(len(b) - 3)
            value = rng.choice(INTERESTING_U32 + [len(b), len(b) - 4, len(b) + 4, rng.randrange(len(b) + 64)])
            b[pos : pos + 4] = struct.pack("<I", value & 0xFFFFFFFF)
        elif kind == 3 and len(b) >= 2:  # a vtable-sized word
            pos = rng.randrange(0, len(b) - 1) & ~1
            value = rng.choice(INTERESTING_U16 + [rng.randrange(0, 256)])
            b[pos : pos + 2] = struct.pack("<H", value)
        elif kind == 4:  # nudge a word by a small delta (offsets that just miss)
            if len(b) >= 4:
                pos = rng.randrange(0, len(b) - 3) & ~3
                (v,) = struct.unpack_from("<I", b, pos)
                struct.pack_into("<I", b, pos, (v + rng.choice((-8, -4, -1, 1, 4, 8))) & 0xFFFFFFFF)
        elif kind == 5:  # delete a span
            del b[pos : pos + rng.randrange(1, 16)]
        elif kind == 6:  # insert junk
            b[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        else:  # copy a span over another place
            n = rng.randrange(1, 24)
            src = rng.randrange(len(b))
            b[pos : pos + n] = b[src : src + n]
    return bytes(b)


def corpus() -> list[bytes]:
    rng = random.Random(20240605)
    out: list[bytes] = [b"", b"\x00" * 16, b"\xff" * 64, struct.pack("<I", 4) * 8]
    for buf in seed_buffers().values():
        out.extend(truncations(buf))
        out.extend(mutate(buf, rng) for _ in range(MUTATIONS_PER_SEED))
    return out


def test_fuzz_truncated_and_mutated_buffers(driver: Path, tmp_path: Path) -> None:
    buffers = corpus()
    result = run_driver(driver, buffers, tmp_path, dump=False)
    records, accepted = (int(x) for x in result.stdout.split()[1::2])
    assert records == len(buffers)
    # The corpus must reach deep into the reader, not bounce off the first check.
    assert 0.05 * records < accepted < 0.9 * records, result.stdout


def test_accepted_mutants_read_like_python(driver: Path, tmp_path: Path) -> None:
    """Differential check: whatever the C reader accepts, the Python runtime reads the same way."""
    rng = random.Random(7)
    seeds = list(seed_buffers().values())
    buffers = [mutate(rng.choice(seeds), rng) for _ in range(3000)]
    views = dump(driver, buffers, tmp_path)
    compared = 0
    for buf, view in zip(buffers, views, strict=True):
        if not view["ok"]:
            continue
        try:
            expected = wire_view(buf)
        except Exception as exc:  # the Python runtime failing on a buffer the reader accepted
            pytest.fail(f"reader accepted a buffer Python cannot read ({exc!r}): {buf.hex()}")
        assert same(view, expected), f"{buf.hex()}\nC:  {view}\nPy: {expected}"
        compared += 1
    assert compared > 100
