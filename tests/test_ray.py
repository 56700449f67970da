"""The Ray backend on a local CPU cluster started here: TP=3 and PP=2 emit exactly the tokens of
the in-process path (fp32, greedy) for `ar` and `triforce`; a shard that dies mid-request is
restarted and the output is unchanged, or the request fails with a clear error when no restart is
allowed. Plus the transforms themselves, in-process and exact (PP) on the real model."""
import json

import pytest
import torch

from triforce.runtime.config import RunConfig
from triforce.runtime.backends import open_engine
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError

BASE = dict(max_new_tokens=12, retrieval_budget=96, chunk_size=8, draft_sinks=4, draft_window=60, gamma1=2,
            gamma2=4, retrieval_rebuild="every:8")
MODES = ("ar", "triforce")
pytestmark = pytest.mark.slow   # a Ray cluster and the real model: minutes on a 2-core machine


@pytest.fixture(scope="module")
def local():
    return Engine(RunConfig(mode="triforce"))


@pytest.fixture(scope="module")
def prompt(local):
    from triforce.runtime.assets import kjv_books
    return local.tokenizer.encode(kjv_books(["Jonah"]))[:150]


@pytest.fixture(scope="module")
def expected(local, prompt):
    return {mode: local.generate(prompt, RunConfig(mode=mode, **BASE)).token_ids for mode in MODES}


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from triforce.actors.client import worker_env
    ray.init(num_cpus=8, include_dashboard=False, logging_level="ERROR", runtime_env=worker_env())
    yield ray
    ray.shutdown()


def ray_run(tp=1, pp=1, **kw):
    return RunConfig(backend="ray", tp=tp, pp=pp, **{**BASE, **kw})


def test_pp_stages_from_the_host_tier_equal_the_plain_model(local, prompt):
    """Pipeline stages mapping the weights from a host arena (as shards map their node's memory
    actor's), run one after another in this process: logits bit-identical to the model on the
    checkpoint's own layout (shards keep it: their weights are views of the arena), and within
    fp32 rounding of the engine's model, whose linears are packed at load (ops.pack_linears)."""
    from triforce.actors.memory import NodeMemory
    from triforce.actors.shard import ShardState
    from triforce.runtime.cache_full import FullCache
    from triforce.runtime.model import load_model
    tier = NodeMemory("tftest")
    manifest = tier.publish_checkpoint(str(local.model_dir), "fp32")
    assert tier.usage()["total_bytes"] >= 134_000_000 * 4
    stages = [ShardState(str(local.model_dir), "fp32", "cpu", None, tp=1, pp=3, stage=s, tp_rank=0, weights=manifest)
              for s in range(3)]
    assert [st.layers for st in stages] == [(0, 10), (10, 20), (20, 30)]
    spec = {"target": dict(kind="full", capacity=200)}
    hidden = None
    for st in stages:
        hidden = st.run([["new", spec], ["forward", "target", prompt[:40], False]], hidden)
    unpacked = load_model(local.model_dir, "fp32", "cpu", local.cfg)
    cache = FullCache(local.cfg, unpacked.rope(200), 1, 200, local.device, unpacked.dtype)
    assert torch.equal(hidden, unpacked(torch.tensor([prompt[:40]]), cache))
    cache = FullCache(local.cfg, local.model.rope(200), 1, 200, local.device, local.model.dtype)
    torch.testing.assert_close(hidden, local.model(torch.tensor([prompt[:40]]), cache), rtol=1e-4, atol=1e-3)
    del stages
    tier.close()


def test_tp_that_does_not_divide_the_kv_heads_is_refused(local):
    from triforce.runtime.parallel import check_tp
    with pytest.raises(UserError, match="--tp 2 does not divide the model's 3 KV heads"):
        check_tp(local.cfg, 2)


def test_cli_refuses_a_bad_split_before_starting_ray(capsys):
    from triforce.runtime.cli import main
    code = main(["generate", "--backend", "ray", "--tp", "2", "--prompt", "hi", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "triforce: error: --tp 2 does not divide the model's 3 KV heads" in err
    code = main(["generate", "--backend", "ray", "--pp", "31", "--prompt", "hi", "--quiet"])
    assert code == 2 and "--pp 31 must be between 1 and the model's 30 layers" in capsys.readouterr().err


def test_tp_and_pp_need_the_ray_backend():
    with pytest.raises(UserError, match="need --backend ray"):
        RunConfig(tp=3).validate()


def test_tp3_equals_local(cluster, prompt, expected):
    client = open_engine(ray_run(tp=3, mode="triforce"))
    try:
        for mode in MODES:
            result = client.generate(prompt, ray_run(tp=3, mode=mode))
            assert result.token_ids == expected[mode], mode
            ray_stats = result.stats["ray"]
            assert ray_stats["tp"] == 3 and ray_stats["restarts"] == 0
            # one call per shard per forward pass of a target-weight level (prefill: one), never per token
            passes = sum(lv["passes"] for name, lv in result.stats["levels"].items() if name != "drafter")
            assert ray_stats["decode_calls"] == 3 * ray_stats["decode_passes"] == 3 * passes
            assert ray_stats["remote_calls"] == 3 * (passes + 1)
        # --gamma auto (the default for greedy requests): its probe times the shards' passes too
        auto = client.generate(prompt, ray_run(tp=3, mode="triforce", gamma="auto"))
        assert auto.token_ids == expected["triforce"] and auto.stats["gamma"]["policy"] == "auto"
        assert auto.stats["gamma"]["pass_ms"]["target"]["1"] > 0
    finally:
        client.close()


def test_pp2_equals_local_and_survives_a_dead_shard(cluster, local, prompt, expected):
    client = open_engine(ray_run(pp=2, mode="triforce"))
    try:
        for mode in MODES:
            assert client.generate(prompt, ray_run(pp=2, mode=mode)).token_ids == expected[mode], mode
        # KV offloaded in the shards (the same offload/ code): layers 7.. of the model, across both stages
        for mode in ("ar", "triforce"):
            result = client.generate(prompt, ray_run(pp=2, mode=mode, on_chip_layers=7))
            assert result.token_ids == expected[mode], mode
            placement = result.stats["placement"]
            assert (placement["pp"], placement["devices"], placement["on_chip_layers"], placement["weights"]) == \
                (2, 2, 7, "resident")
        # PP changes no arithmetic and the sampler lives in the coordinator: seeded sampling matches too
        sampled = dict(mode="triforce", temperature=0.6, top_p=0.9, seed=7,   # the lower levels Ray runs (auto's there)
                       middle_weights="same", draft_weights="same", draft_vocab=0)
        assert (client.generate(prompt, ray_run(pp=2, **sampled)).token_ids ==
                local.generate(prompt, RunConfig(**BASE, **sampled)).token_ids)
        # the second stage's process exits during its 6th pass (mid-decode): restarted, KV refilled
        cluster.get(client.shards()[1][0].exit_after.remote(6))
        result = client.generate(prompt, ray_run(pp=2, mode="triforce"))
        assert result.token_ids == expected["triforce"]
        assert result.stats["ray"]["restarts"] == 1
        # no restart allowed: a clear error, no hang; the next request gets fresh shards
        cluster.get(client.shards()[0][0].exit_after.remote(4))
        with pytest.raises(UserError, match="a shard actor failed and 0 restart"):
            client.generate(prompt, ray_run(pp=2, mode="ar", ray_retries=0))
        assert client.generate(prompt, ray_run(pp=2, mode="ar")).token_ids == expected["ar"]
    finally:
        client.close()


def test_bench_ray_suite_compares_local_and_ray(cluster, tmp_path):
    from triforce.runtime.cli import main
    assert main(["bench", "--suite", "ray", "--contexts", "150", "--new-tokens", "4", "--modes", "ar",
                 "--budget", "96", "--repeats", "1", "--out", str(tmp_path)]) == 0
    [row] = json.loads((tmp_path / "ray.json").read_text())["rows"]
    assert row["mode"] == "ar" and row["equal"] and row["new_tokens"] == 4
    assert row["calls_per_token"] >= 1 and row["ray_ms_per_pass"] >= row["shard_ms_per_pass"] > 0
    assert cluster.is_initialized()   # the suite leaves a cluster it did not start running
