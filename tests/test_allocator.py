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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages")
def test_torch_puts_large_blocks_on_huge_pages_when_triforce_is_imported_first():
    import os
    import subprocess
    from pathlib import Path
    from triforce.runtime.allocator import THP_ENABLED
    if not Path(THP_ENABLED).exists() or "[never]" in Path(THP_ENABLED).read_text():
        pytest.skip("this kernel gives no transparent huge pages")
    probe = ("import os, triforce.runtime, torch; t = torch.ones(8 << 20, dtype=torch.uint8); "
             "rollup = open('/proc/self/smaps_rollup').read(); "
             "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), int(rollup.split('AnonHugePages:')[1].split()[0]))")
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    on = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    flag, huge_kb = on.stdout.split()
    assert flag == "1" and int(huge_kb) >= 2048, on.stdout + on.stderr   # the 8 MB block: 2 MB pages
    off = subprocess.run([sys.executable, "-c", probe], env={**env, "THP_MEM_ALLOC_ENABLE": "0"},
                         capture_output=True, text=True, check=True)
    assert off.stdout.split() == ["0", "0"], off.stdout + off.stderr   # the user's choice stands
