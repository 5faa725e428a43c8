"""The judge's cache of C++ compile outcomes: bounded by count and by bytes of binaries."""

from rlrun.sandbox.cpp import CompileCache, CompileOutcome


def _outcome(size: int) -> CompileOutcome:
    return CompileOutcome(ok=True, stderr="", binary=b"\x7f" * size)


def test_the_least_recently_used_binaries_go_once_their_bytes_pass_the_limit() -> None:
    cache = CompileCache(capacity=10, max_bytes=1000)
    for key in "abc":
        cache.put(key, _outcome(400))
    assert cache.get("a") is None
    assert cache.get("b") is not None and cache.get("c") is not None
    cache.get("b")  # now c is the least recently used
    cache.put("d", _outcome(400))
    assert [k for k in "bcd" if cache.get(k)] == ["b", "d"]


def test_the_count_still_bounds_the_cache_and_a_replaced_key_is_counted_once() -> None:
    cache = CompileCache(capacity=2, max_bytes=1000)
    cache.put("a", _outcome(300))
    cache.put("a", _outcome(300))
    cache.put("b", _outcome(300))
    assert cache.get("a") is not None and cache.get("b") is not None
    cache.put("c", _outcome(0))
    assert cache.get("a") is None


def test_a_binary_larger_than_the_limit_is_kept_until_the_next_one() -> None:
    cache = CompileCache(max_bytes=100)
    cache.put("big", _outcome(500))
    assert cache.get("big") is not None
    cache.put("next", _outcome(10))
    assert cache.get("big") is None and cache.get("next") is not None
