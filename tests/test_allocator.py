"""runtime/allocator.py: glibc keeps freed decode-loop blocks for reuse; TRIFORCE_MALLOC=0 opts out."""
import sys

import pytest

from triforce.runtime.allocator import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_thresholds_are_set_on_glibc_and_the_opt_out_is_honoured(monkeypatch):
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert keep_freed_memory() is True
    monkeypatch.setenv("TRIFORCE_MALLOC", "0")
    assert keep_freed_memory() is False
