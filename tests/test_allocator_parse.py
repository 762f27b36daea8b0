"""TORCHLEAN_CUDA_CACHE_CAP_BYTES parsing: whole-string decimal, 0..2^64-1, everything else
warned about (naming the variable) and ignored."""
import pytest

from engine.runtime.allocator import CAP_ENV_VAR, UINT64_MAX, AllocatorStats, parse_cache_cap


@pytest.mark.parametrize("text, cap", [
    (None, 0),                                   # unset: unbounded, no warning
    ("0", 0),                                    # explicit unbounded
    ("1048576", 1048576),
    ("18446744073709551615", UINT64_MAX),        # the largest valid value
    ("0001024", 1024),                           # leading zeros are still a decimal count
])
def test_accepted_values(text, cap):
    assert parse_cache_cap(text) == (cap, None)


@pytest.mark.parametrize("text, why", [
    ("", "not a decimal byte count"),
    ("1MiB", "not a decimal byte count"),
    ("-1", "not a decimal byte count"),
    (" 1024", "not a decimal byte count"),
    ("1024 ", "not a decimal byte count"),
    ("1024\n", "not a decimal byte count"),      # `$` in a regex would let this through
    ("0x100", "not a decimal byte count"),
    ("1e6", "not a decimal byte count"),
    ("+5", "not a decimal byte count"),
    ("１２３", "not a decimal byte count"),         # non-ASCII digits
    ("99999999999999999999999999", "over 2^64-1"),
    ("18446744073709551616", "over 2^64-1"),     # overflow by one
    ("9" * 5000, "over 2^64-1"),                 # beyond int()'s default digit limit
])
def test_rejected_values_warn_naming_the_variable(text, why):
    cap, warning = parse_cache_cap(text)
    assert cap == 0
    assert warning is not None and CAP_ENV_VAR in warning and why in warning


def test_format_spells_unbounded_for_zero_cap():
    stats = AllocatorStats(1, 2, 3, 4, 5, 6, 7, 8, cache_bytes=9, cache_cap_bytes=0,
                           mem_free=10, mem_total=11)
    text = stats.format()
    assert "cache_cap=unbounded" in text and "live=1 " in text and "cache=9 " in text
    capped = AllocatorStats(1, 2, 3, 4, 5, 6, 7, 8, 9, 4096, 10, 11).format()
    assert "cache_cap=4096" in capped and "unbounded" not in capped


def test_the_cpu_stub_names_a_malformed_cap_once(monkeypatch):
    from engine.runtime import allocator
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("the GPU path warns when it installs the cache (tested in test_cuda_allocator)")
    monkeypatch.setenv(CAP_ENV_VAR, "abc")
    monkeypatch.setattr(allocator, "_stub_cap_checked", False)
    with pytest.warns(RuntimeWarning, match=rf"{CAP_ENV_VAR}='abc' is not a decimal byte count.*"
                                            "CPU parity stub"):
        stats = allocator.allocator_stats()
    assert stats.backend == "cpu-parity-stub" and stats.cache_cap_bytes == 0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        allocator.allocator_stats()                 # once per process, not on every call
