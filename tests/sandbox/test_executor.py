"""The executor's pure parts: the plain-data encoding, framing, and the seccomp program."""

import json
import os

import pytest

from rlrun.sandbox import executor


@pytest.mark.parametrize("value", [
    None, True, 0, -3, 10 ** 40, 1.5, float("inf"), "", "é\n", [1, [2]], (1, "a"), (),
    {"a": 1, 2: [3], (1, 2): None}, {1, 2}, frozenset({"x"}), b"\x00\xff", [(1, {2: {3}})],
])
def test_plain_round_trip_keeps_exact_types(value) -> None:
    back = executor.decode_plain(executor.encode_plain(value))
    assert back == value and type(back) is type(value)


def test_nan_round_trips() -> None:
    back = executor.decode_plain(executor.encode_plain(float("nan")))
    assert back != back


@pytest.mark.parametrize("value", [object(), type("I", (int,), {})(3), [1, object()],
                                   {"a": type("S", (str,), {})("x")}, range(3), print])
def test_non_plain_values_are_refused(value) -> None:
    with pytest.raises(executor.NotPlainData):
        executor.encode_plain(value)


def test_recursive_structures_are_refused() -> None:
    a: list = []
    a.append(a)
    with pytest.raises(executor.NotPlainData):
        executor.encode_plain(a)


def test_malformed_trees_are_refused() -> None:
    for tree in [{"x": 1}, {"t": [1], "d": []}, {"zz": []}]:
        with pytest.raises(executor.NotPlainData):
            executor.decode_plain(tree)


def test_frames_round_trip_and_garbage_is_reported() -> None:
    r, w = os.pipe()
    executor.send_frame(w, {"k": "ret", "v": [1, "x"]})
    os.close(w)
    data = os.read(r, 1 << 16)
    os.close(r)
    frames, err = executor.parse_frames(data)
    assert frames == [{"k": "ret", "v": [1, "x"]}] and err == ""
    assert executor.parse_frames(data + b"\x00\x00")[1] == "trailing bytes on the result pipe"
    assert executor.parse_frames(data[:-1])[1] == "truncated result frame"
    assert executor.parse_frames(b"\x00\x00\x00\x02{x")[1] == "malformed result frame"


@pytest.mark.parametrize("value", [
    {"k": "ret", "v": [1, -2.5, "é\udcff", None, True, {"t": []}]}, float("inf"), 10 ** 40, "",
])
def test_json_helpers_match_the_json_module(value) -> None:
    text = executor.dump_json(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert executor.load_json(text) == json.loads(text)


def test_load_json_takes_exactly_one_value() -> None:
    for text in ["", "[1] [2]", "{", "nope", " 1"]:
        with pytest.raises(ValueError):
            executor.load_json(text)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the deny-list has x86_64 numbers")
def test_seccomp_program_jumps_stay_in_range() -> None:
    lists = [(executor.X86_64_DENY.values(), True), (executor.X86_64_CHILD_DENY.values(), False)]
    for denied, sockets in lists:
        arr, prog = executor.build_seccomp(denied, sockets)
        n = prog.len
        for i in range(n):
            op = arr[i]
            if op.code == 0x15 or op.code == 0x35:
                assert i + 1 + op.jt < n and i + 1 + op.jf < n
        assert arr[n - 1].k == executor.SECCOMP_RET_ERRNO | 1
        assert arr[n - 2].k == executor.SECCOMP_RET_ALLOW


def test_opaque_values_become_handles_and_come_back() -> None:
    objects: list = []

    def handle(obj):
        objects.append(obj)
        return {"h": len(objects) - 1}

    marker = object()
    tree = executor.encode_plain([1, (marker, "x"), {"k": marker}], opaque=handle)
    assert tree == [1, {"t": [{"h": 0}, "x"]}, {"d": [["k", {"h": 1}]]}]
    back = executor.decode_plain(tree, lambda node: objects[node["h"]])
    assert back == [1, (marker, "x"), {"k": marker}]
    with pytest.raises(executor.NotPlainData):  # the judge's decoding takes no handles
        executor.decode_plain(tree)


def test_update_in_place_keeps_the_callers_objects() -> None:
    inner = [3, 1, 2]
    args = [inner, {"a": [1]}, {5}, ([2, 1],), "s"]
    after = [[1, 2, 3], {"a": [1, 9]}, {6}, ([1, 2],), "s"]
    held = [args[1]["a"], args[3][0]]
    for old, new in zip(args, after, strict=True):
        executor.update_in_place(old, new)
    assert args == after
    assert args[0] is inner and inner == [1, 2, 3]
    assert held == [[1, 9], [1, 2]] and held[0] is args[1]["a"]
    shrunk = [1, 2, 3]
    assert executor.update_in_place(shrunk, [4]) is shrunk and shrunk == [4]
    assert executor.update_in_place({"a": 1}, {"b": 2}) == {"b": 2}
    assert executor.update_in_place(1, 2) == 2


def test_a_slot_keeps_binaries_within_its_byte_budget_and_always_the_newest(monkeypatch) -> None:
    monkeypatch.setattr(executor, "MAX_BINARY_BYTES", 1000)
    slot = executor.Slot(lambda: None)
    try:
        for key in "abc":
            executor.store_binary(slot, key, b"\x7f" * 400)
        assert list(slot.binaries) == ["b", "c"]
        executor.store_binary(slot, "big", b"\x7f" * 5000)
        assert list(slot.binaries) == ["big"]
        assert os.pread(slot.binaries["big"], 5000, 0) == b"\x7f" * 5000
    finally:
        for fd in slot.binaries.values():
            os.close(fd)
