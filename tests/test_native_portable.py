"""Every native source compiles without CPU-specific flags (the portable build that run.sh falls
back to, and what -march=native gives on a CPU without AVX-512). A syntax-only compile: it finds
code that only the vector paths declare (round 16 found attention_cpu.cpp's chunking inside
`#if TF_AVX512`, so a CPU without AVX-512 got no attention kernel at all)."""
import shutil
import subprocess
import sysconfig

import pytest

from triforce.runtime.native import CSRC, SOURCES


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_compiles_without_cpu_flags(source):
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], str(CSRC)]
    command = ["c++", "-fsyntax-only", "-std=c++17", "-fopenmp", "-DTORCH_EXTENSION_NAME=portable_check",
               *(f"-I{d}" for d in includes), str(source)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{source.name} does not compile without -march flags:\n{result.stderr[-3000:]}"
