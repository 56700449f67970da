"""Offloading: the host tier, the copy lanes, the offloaded full cache and weight streaming give
exactly the resident results, on the real model for every mode and on a tiny model with slow,
poisoning copies that would expose any read of a buffer before its copy completed."""
import dataclasses
import json
import multiprocessing
import time

import pytest
import torch

from triforce.offload.kv import OffloadedFullCache
from triforce.offload.plan import GB, GIB, Machine, kv_layer_bytes, layer_weight_bytes, plan
from triforce.offload.tier import Copier, HostTier
from triforce.offload.weights import offload_weights
from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import ModelConfig, RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError
from triforce.runtime.model import load_model

transformers = pytest.importorskip("transformers")


class PoisonCopier(Copier):
    """Every copy first fills its destination with NaN, waits, then copies: a compute step that
    reads a buffer before the copy's event would see NaN (or the previous layer's data)."""

    def _copy(self, dst, src):
        if dst.is_floating_point():
            dst.fill_(float("nan"))
        time.sleep(0.002)
        dst.copy_(src)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(out)
    return out


def run_passes(model, cache, tokens):
    """Prefill in two chunks, a speculative 5-token pass, a crop, then three 1-token steps."""
    out = [model(tokens[:, :37], cache), model(tokens[:, 37:80], cache)]
    out.append(model(tokens[:, 80:85], cache))
    cache.crop(82)
    for t in range(82, 85):
        out.append(model(tokens[:, t:t + 1], cache))
    return torch.cat([o[:, -1] for o in out])  # [passes, V]


@pytest.mark.parametrize("on_chip", [0, 2, 4])
@pytest.mark.parametrize("prefetch", [True, False])
def test_offloaded_cache_equals_resident_with_poisoned_slow_copies(tiny_dir, on_chip, prefetch):
    model = load_model(tiny_dir)
    tokens = torch.randint(0, 320, (1, 90), generator=torch.Generator().manual_seed(1))
    resident = FullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype)
    expected = run_passes(model, resident, tokens)
    tier, copier = HostTier(model.device), PoisonCopier(model.device)
    cache = OffloadedFullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype, on_chip, tier, copier,
                               prefetch=prefetch)
    got = run_passes(model, cache, tokens)
    assert not got.isnan().any()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for layer in range(model.cfg.num_layers):  # the host tier holds exactly what the resident cache holds
        for got_kv, want_kv in zip(cache.layer_kv(layer), resident.layer_kv(layer), strict=True):
            assert got_kv.shape[2] == 85  # cropped to 82, then three 1-token steps
            torch.testing.assert_close(got_kv, want_kv, rtol=0, atol=0)
    cache.close()
    assert tier.bytes == 0


def test_copies_of_cache_positions_go_as_contiguous_runs():
    """Positions [a, b) of a [B, Hkv, S, D] buffer are B * Hkv contiguous runs, each copied
    directly (a GPU copy of a strided host tensor goes through a synchronous pageable staging copy)."""
    from triforce.offload.tier import contiguous_pairs
    src = torch.randn(2, 3, 50, 8)
    dst = torch.zeros(2, 3, 50, 8)
    pairs = contiguous_pairs(dst[:, :, 10:30], src[:, :, 10:30])
    assert len(pairs) == 6 and all(d.is_contiguous() and s.is_contiguous() for d, s in pairs)
    Copier(torch.device("cpu"))._copy(dst[:, :, 10:30], src[:, :, 10:30])
    assert torch.equal(dst[:, :, 10:30], src[:, :, 10:30]) and not dst[:, :, :10].any() and not dst[:, :, 30:].any()
    assert len(contiguous_pairs(dst, src)) == 1                                  # whole buffers: one copy
    square = torch.randn(64, 64)
    assert len(contiguous_pairs(torch.empty(64, 64), square.t())) == 1          # strided rows: no split helps


def test_offloaded_kv_and_streamed_weights_in_bf16_take_the_per_layer_path(tiny_dir):
    """bf16 on a CPU with the native kernels runs a resident pass in one native call
    (model.DecoderPlan over cache.slots()). An offloaded cache and streamed layers must decline
    it and go layer by layer; both once broke every bf16 pass (the cache's double-buffer events
    shadowed slots(), and the plan read a streamed layer's attributes before checking its type)."""
    from triforce.runtime.model import fuse_projections
    from triforce.runtime.ops import pack_linears
    model = pack_linears(fuse_projections(load_model(tiny_dir, "bf16")))
    tokens = torch.randint(0, 320, (1, 90), generator=torch.Generator().manual_seed(1))
    expected = run_passes(model, FullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype), tokens)
    tier, copier = HostTier(model.device), Copier(model.device)
    cache = OffloadedFullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype, 2, tier, copier)
    assert cache.slots() is None
    torch.testing.assert_close(run_passes(model, cache, tokens), expected, rtol=2e-2, atol=2e-2)
    cache.close()
    streamed = fuse_projections(load_model(tiny_dir, "bf16"))          # as Engine does: streamed weights stay unpacked
    offload_weights(streamed, tier, copier, streamed.device)
    cache = OffloadedFullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype, 0, tier, copier)
    torch.testing.assert_close(run_passes(streamed, cache, tokens), expected, rtol=2e-2, atol=2e-2)
    cache.close()


@pytest.mark.parametrize("prefetch", [True, False])
def test_streamed_weights_equal_resident_with_poisoned_slow_copies(tiny_dir, prefetch):
    resident = load_model(tiny_dir)
    tokens = torch.randint(0, 320, (1, 90), generator=torch.Generator().manual_seed(2))
    expected = run_passes(resident, FullCache(resident.cfg, resident.rope(128), 1, 128, resident.device,
                                              resident.dtype), tokens)
    model = load_model(tiny_dir)
    tier, copier = HostTier(model.device), PoisonCopier(model.device)
    offload_weights(model, tier, copier, model.device, prefetch=prefetch)
    cache = OffloadedFullCache(model.cfg, model.rope(128), 1, 128, model.device, model.dtype, 1, tier, copier)
    got = run_passes(model, cache, tokens)
    assert not got.isnan().any()
    # not bit-exact: the slot tensors sit at other addresses, so BLAS may pick other kernels (~1e-7)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    layer_bytes = layer_weight_bytes(model.cfg, 4)
    assert copier.traffic.host_to_device >= 6 * model.cfg.num_layers * layer_bytes  # each of the 6 passes streamed them


def _read_arena(prefix, queue):
    tensor, arena = HostTier.attach(prefix, "x", (4, 8), torch.float32)
    queue.put(tensor.sum().item())
    tensor.fill_(2.0)  # writes are visible to the owner: it is one memory
    del tensor
    arena.close()


def test_host_tier_is_shared_with_another_process():
    tier = HostTier(torch.device("cpu"))
    x = tier.allocate("x", (4, 8), torch.float32)
    x.fill_(1.5)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_arena, args=(tier.prefix, queue))
    proc.start()
    proc.join(60)
    assert queue.get(timeout=5) == 48.0
    assert float(x.sum()) == 64.0
    with pytest.raises(FileNotFoundError, match="memory actor"):
        HostTier.attach(tier.prefix, "missing", (1,), torch.float32)
    del x
    tier.close()


# ---- the real model: every mode, KV and weights offloaded -------------------------------------------

@pytest.fixture(scope="module")
def engines(default_model_dir, cut_drafter):
    base = dict(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter))
    return Engine(RunConfig(**base)), Engine(RunConfig(offload_weights=True, **base))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ar", "spec", "retrieval", "streaming", "triforce"])
def test_every_mode_offloaded_equals_resident_greedy(engines, mode):
    from triforce.runtime.assets import kjv_books
    resident, streamed = engines
    ids = resident.tokenizer.encode(kjv_books(["Jonah"]))[:203]
    base = dict(model=str(resident.model_dir), draft_model=str(resident.draft_dir), mode=mode, max_new_tokens=16,
                retrieval_budget=96, chunk_size=8, draft_sinks=4, draft_window=60, gamma1=2, gamma2=4,
                retrieval_rebuild="every:8", prefill_chunk=64)
    expected = resident.generate(ids, RunConfig(**base))
    kv = resident.generate(ids, RunConfig(on_chip_layers=11, **base))
    both = streamed.generate(ids, RunConfig(on_chip_layers=0, **base))
    assert kv.token_ids == expected.token_ids
    assert both.token_ids == expected.token_ids
    assert "offload" not in expected.stats
    moved = kv.stats["offload"]["moved_bytes_per_token"]
    assert moved["target"] > 0 and all(v == 0 for k, v in moved.items() if k != "target")  # drafting stays on chip
    assert both.stats["offload"]["offload_weights"] is True


# ---- the planner -------------------------------------------------------------------------------------

def llama2_7b() -> ModelConfig:
    from triforce.offload.plan import _config
    return _config("configs/models/llama2-7b-128k.json", None)


@pytest.mark.parametrize("gpus, memory_gib, context", [(1, 24, 127_000), (2, 24, 127_000), (1, 80, 122_000),
                                                       (2, 24, 16_000), (1, 24, 32_000), (1, 12, 127_000)])
def test_plan_never_exceeds_the_memory_it_was_given(gpus, memory_gib, context):
    cfg = llama2_7b()
    m = Machine(gpus, memory_gib * GIB, 1000 * GB, 25 * GB, 256 * GIB)
    p = plan(cfg, m, "fp16", context)
    assert sum(p.device_bytes.values()) <= gpus * (memory_gib * GIB) - gpus * 1.5 * GIB
    assert sum(p.host_bytes.values()) <= m.host_memory
    kv_total = cfg.num_layers * kv_layer_bytes(cfg, 2, context)
    assert p.device_bytes["full_kv_on_chip"] + p.host_bytes["full_kv"] == kv_total
    assert p.offload_weights == (memory_gib == 12)  # 13.5 GB of weights cannot stay on a 12 GB card
    assert p.triforce_ms < p.ar_ms


def test_plan_for_the_papers_offloaded_setting_is_near_its_measurements():
    m = Machine(2, 24 * GIB, 1008 * GB, 0.8 * 31.5 * GB, 256 * GIB)
    p = plan(llama2_7b(), m, "fp16", 127_000)
    assert 0 < p.on_chip_layers < 32
    assert 600 < p.ar_ms < 1100            # the paper measured 840 ms
    assert 70 < p.triforce_ms < 160        # and 108 ms


def test_offload_auto_plans_for_the_engines_one_device_and_its_loaded_weights(monkeypatch):
    """The local engine runs on one GPU (probe one, not all), and the plan takes the weights
    where the flags put them (offload_weights) instead of choosing."""
    import triforce.offload.plan as plan_module
    probed = []
    m = Machine(1, 24 * GIB, 1000 * GB, 25 * GB, 256 * GIB)
    monkeypatch.setattr(plan_module, "probe_machine", lambda gpus=None: probed.append(gpus) or m)
    run = RunConfig(dtype="fp16", retrieval_budget=4096)
    free = plan_module.plan_for_run(llama2_7b(), run, 64_000, torch.device("cuda"))
    streamed = plan_module.plan_for_run(llama2_7b(), run, 64_000, torch.device("cuda"), weights_offloaded=True)
    assert not free.offload_weights and free.on_chip_layers < 32   # the planner's own choice: weights stay
    assert streamed.offload_weights and streamed.on_chip_layers > free.on_chip_layers  # their room goes to KV
    plan_module.plan_for_run(llama2_7b(), run, 64_000, torch.device("cpu"))
    assert probed == [1, 1, 0]


# ---- the placement: resolved once, before the engine is built, and reported ----------------------------

@pytest.fixture(scope="module")
def tiny_engine_dir(tiny_dir, default_model_dir):
    """The tiny checkpoint with a tokenizer beside it (the Engine loads one; prompts here are ids < 320)."""
    import shutil
    for path in default_model_dir.glob("*token*"):
        shutil.copy(path, tiny_dir / path.name)
    return tiny_dir


def test_stats_carry_the_placement_resident_and_offloaded(tiny_engine_dir):
    base = dict(model=str(tiny_engine_dir), max_new_tokens=4, retrieval_budget=16, chunk_size=4)
    ids = list(range(3, 60))
    resident = Engine(RunConfig(**base))
    streamed = Engine(RunConfig(offload_weights=True, on_chip_layers=2, **base))
    assert streamed.placement.weights_streamed and streamed.placement.on_chip_layers == 2
    expected = resident.generate(ids, RunConfig(mode="streaming", **base))
    assert expected.stats["placement"] == dict(
        device="cpu", layers=5, on_chip_layers=5, weights="resident", planned_context=None, tp=1, pp=1, devices=1,
        kv_offloaded=False, level_weights={"streaming": "resident", "target": "resident"})
    assert "offload" not in expected.stats
    offloaded = streamed.generate(ids, RunConfig(mode="streaming", **base))    # the engine's on_chip_layers 2
    assert offloaded.token_ids == expected.token_ids
    placement = offloaded.stats["placement"]
    assert (placement["weights"], placement["on_chip_layers"], placement["kv_offloaded"]) == ("streamed", 2, True)
    assert placement["level_weights"] == {"streaming": "streamed", "target": "streamed"}
    assert offloaded.stats["offload"]["on_chip_layers"] == 2 and offloaded.stats["offload"]["offload_weights"] is True
    own = streamed.generate(ids, RunConfig(mode="ar", on_chip_layers=9, **base))  # a request's own: capped at 5
    assert own.stats["placement"]["on_chip_layers"] == 5 and own.stats["placement"]["weights"] == "streamed"


def test_offload_auto_is_planned_once_for_the_engines_device_and_context(tiny_engine_dir, monkeypatch):
    """One plan, made before the model loads, for the engine's one device and the context it was
    given; every request then uses it (the weights decision and the KV layers come from that plan)."""
    import triforce.offload.plan as plan_module
    calls = []

    def fake_plan(cfg, run, context, device, weights_offloaded=None):
        calls.append((context, device.type, weights_offloaded))
        return plan_module.Plan(context, 3, True, 4096, 6, 1.0, 1.0)

    monkeypatch.setattr(plan_module, "plan_for_run", fake_plan)
    run = RunConfig(model=str(tiny_engine_dir), offload="auto", max_new_tokens=4)
    engine = Engine(run, context=61)
    assert calls == [(61, "cpu", None)]
    results = [engine.generate(list(range(3, 60)), run) for _ in range(2)]
    assert calls == [(61, "cpu", None)]                       # never planned again per request
    for result in results:
        assert {k: result.stats["placement"][k] for k in ("planned_context", "on_chip_layers", "weights")} == \
            dict(planned_context=61, on_chip_layers=3, weights="streamed")
        assert result.stats["offload"]["on_chip_layers"] == 3
    Engine(dataclasses.replace(run, offload_weights=True))    # without a context: the model's max_context
    assert calls[-1] == (256, "cpu", True)


def test_generate_plans_offload_auto_for_its_prompt(default_model_dir):
    from triforce.runtime.cli import planned_context
    from triforce.runtime.engine import load_tokenizer
    run = RunConfig(model=str(default_model_dir), offload="auto", max_new_tokens=5)
    text = "In the beginning God created the heaven and the earth."
    assert planned_context(run, text) == len(load_tokenizer(default_model_dir).encode(text)) + 5
    assert planned_context(dataclasses.replace(run, offload="none"), text) is None   # nothing to plan


def test_plan_refuses_what_fits_nowhere():
    m = Machine(1, 8 * GIB, 500 * GB, 10 * GB, 16 * GIB)
    with pytest.raises(UserError, match="does not fit"):
        plan(llama2_7b(), m, "fp16", 127_000)


def test_plan_command(capsys, tmp_path):
    from triforce.runtime.cli import main
    out = tmp_path / "plan.json"
    assert main(["plan", "--model", "configs/models/llama2-7b-128k.json", "--context", "127000", "--gpus", "2",
                 "--gpu-memory-gb", "24", "--pcie-gen", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    saved = json.loads(out.read_text())   # the JSON holds the plan the text prints
    assert f"--on-chip-layers {saved['plan']['on_chip_layers']} " in text and "predicted ar" in text
    assert 0 < saved["plan"]["on_chip_layers"] < 32 and saved["plan"]["triforce_ms"] < saved["plan"]["ar_ms"]
    assert main(["plan", "--context", "1000", "--gpus", "2"]) == 2
    assert "--gpu-memory-gb" in capsys.readouterr().err
    assert main(["plan", "--context", "1000", "--acceptance", "2,0.5"]) == 2


def test_offload_flags_reach_the_run_config():
    from triforce.runtime.cli import main
    with pytest.raises(UserError, match="on_chip_layers -1"):
        RunConfig(on_chip_layers=-1).validate()
    with pytest.raises(UserError, match="offload 'always'"):
        RunConfig(offload="always").validate()
    assert main(["generate", "--prompt", "x", "--offload", "auto", "--on-chip-layers", "-2"]) == 2
    with pytest.raises(UserError, match="not wired into --backend ray"):
        RunConfig(backend="ray", offload_weights=True).validate()


def test_a_full_host_tier_is_a_clear_error(monkeypatch):
    import os
    def no_space(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    tier = HostTier(torch.device("cpu"))
    with pytest.raises(UserError, match="--shm-size"):
        tier.allocate("big", (1024,), torch.float32)
    assert tier.bytes == 0


@pytest.mark.slow
def test_offloaded_generation_under_inference_mode(engines):
    """Callers may wrap generate in inference mode (the bench does): the copy threads must cope
    with arenas and slots created there."""
    resident, _ = engines
    ids = resident.tokenizer.encode("In the beginning God created the heaven and the earth.")
    run = RunConfig(model=str(resident.model_dir), mode="ar", max_new_tokens=4)
    expected = resident.generate(ids, run).token_ids
    with torch.inference_mode():
        assert resident.generate(ids, dataclasses.replace(run, on_chip_layers=3)).token_ids == expected


def test_a_gpu_pass_costs_the_larger_of_its_reads_and_its_issue_time():
    """Eager GPU passes are issued from Python (0.4 ms + 0.55 ms a layer on the H200 host of round
    20); the GPU runs meanwhile, so a pass costs the larger of the two. A replayed one costs its
    reads plus 0.1 ms a layer (round 33). A CPU pass is one native call."""
    from triforce.offload.plan import issue_seconds, pass_seconds
    cfg = llama2_7b()
    h200 = Machine(1, 140 * GIB, 4814 * GB, 55 * GB, 100 * GIB)
    assert issue_seconds(cfg, h200) == pytest.approx(0.4e-3 + 32 * 0.55e-3)
    middle = pass_seconds(cfg, h200, 2, 4096, 0, False)                  # 15.7 GB: 3.3 ms of HBM
    assert middle == pytest.approx(issue_seconds(cfg, h200))
    full = pass_seconds(cfg, h200, 2, 122_000, 0, False)                 # 77 GB: 16 ms < 18 ms of issue
    assert full == pytest.approx(issue_seconds(cfg, h200))
    offloaded = pass_seconds(cfg, h200, 2, 122_000, 32, False)           # 64 GB over 55 GB/s
    assert offloaded > 1.0 > issue_seconds(cfg, h200)
    replayed = pass_seconds(cfg, h200, 2, 4096, 0, False, replayed=True)  # memory time + 0.1 ms a layer (round 33)
    assert replayed == pytest.approx(15.7e9 / 4814e9 + 32 * 0.1e-3, rel=0.05) and replayed < middle
    cpu = Machine(0, 20 * GIB, 30 * GB, 15 * GB, 20 * GIB)
    assert issue_seconds(cfg, cpu) == 0 and pass_seconds(cfg, cpu, 2, 4096, 0, False) == pytest.approx(15.7e9 / 30e9, rel=0.05)
    assert pass_seconds(cfg, cpu, 2, 4096, 0, False, replayed=True) == pass_seconds(cfg, cpu, 2, 4096, 0, False)
