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
def test_every_source_compiles_without_cpu_flags():
    """The sources checked at the same time (each parse of the torch headers csrc/torch_api.h includes takes ~13 s of one core)."""
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], str(CSRC)]
    checks = {source.name: subprocess.Popen(
        ["c++", "-fsyntax-only", "-std=c++17", "-fopenmp", "-DTORCH_EXTENSION_NAME=portable_check",
         *(f"-I{d}" for d in includes), str(source)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for source in SOURCES}
    failed = {name: check.communicate()[1] for name, check in checks.items()}
    failed = {name: err for name, err in failed.items() if checks[name].returncode != 0}
    assert not failed, "".join(f"{name} does not compile without -march flags:\n{err[-3000:]}\n" for name, err in failed.items())
    assert len(checks) == len(SOURCES) >= 4


def test_a_build_killed_midway_does_not_block_the_next(tmp_path):
    """torch's build lock is a plain file: a build killed by a time limit leaves it, and every later
    build waited for it forever (seen on a GPU machine, round 20). Our lock, released by the kernel
    when its holder dies, makes such a file stale, and it is removed."""
    from triforce.runtime.native import build_lock
    (tmp_path / "lock").write_text("")                      # left by a killed build
    with build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_a_build_is_announced_when_the_module_is_missing_or_older_than_a_source(tmp_path):
    """A build takes about a minute; a run whose first pass builds one says so on stderr instead of
    stalling silently (an edited kernel once cost a 2-token `generate` 35 s of "decode", round 31)."""
    import os
    from triforce.runtime.native import needs_build
    source, header, built = tmp_path / "k.cpp", tmp_path / "k.h", tmp_path / "k.so"
    for path, when in ((source, 100), (header, 100)):
        path.write_text("")
        os.utime(path, (when, when))
    assert needs_build(built, [source, header])                      # never built
    built.write_text("")
    os.utime(built, (200, 200))
    assert not needs_build(built, [source, header])                  # built after every source
    os.utime(header, (300, 300))
    assert needs_build(built, [source, header])                      # a header edited since


def test_models_off_the_cpu_or_off_bf16_and_fp32_never_ask_for_native_modules(monkeypatch):
    """The one-call decoder plan is CPU bf16 or fp32 only; a GPU or fp16 model must not compile
    the CPU kernels just to be told no (a minute or more on a fresh GPU machine)."""
    import torch
    from triforce.runtime import model as model_module, native
    for name in ("layer_cpu", "attention_cpu", "quant_cpu"):
        monkeypatch.setattr(native, name, lambda: pytest.fail("a native module was asked for"))
    from triforce.runtime.config import model_config_from_dict
    cfg = model_config_from_dict(dict(architectures=["LlamaForCausalLM"], vocab_size=64, hidden_size=32,
                                      intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64))
    with torch.device("meta"):
        on_meta = model_module.Transformer(cfg).to(torch.bfloat16)    # stands for a GPU: not a CPU
    assert model_module._build_plan(on_meta) is None
    assert model_module._build_plan(model_module.Transformer(cfg).half()) is None   # fp16 on the CPU
