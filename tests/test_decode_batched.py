"""Batched decoding within a replica (runtime/decode_batched.py): several sequences of different prompt
lengths decoded together give exactly the tokens each gives alone, greedy and seeded, in `ar`,
in the speculative modes and in a batch that mixes modes, with resident or streamed weights (the
drafter is the target's first 4 layers, as in test_modes)."""
import pytest

from triforce.runtime.batch import Replica, pack, unpack
from triforce.runtime.decode_batched import generate_batch
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine


pytestmark = pytest.mark.slow   # the real model, several sequences, each also decoded alone

SMALL = dict(max_new_tokens=10, retrieval_budget=64, chunk_size=8, draft_sinks=4, draft_window=60, gamma1=2,
             gamma2=4, retrieval_rebuild="every:6")


@pytest.fixture(scope="module")
def engine(default_model_dir, cut_drafter, one_thread):
    return Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))


@pytest.fixture(scope="module")
def prompts(engine):
    from triforce.runtime.assets import kjv_books
    ids = engine.tokenizer.encode(kjv_books(["Jonah"]))
    return [ids[:203], ids[250:567], ids[800:930]]   # ragged: 203, 317, 130 tokens


def config(engine, **kw):
    return RunConfig(model=str(engine.model_dir), draft_model=str(engine.draft_dir), **{**SMALL, **kw})


@pytest.mark.parametrize("modes", [("ar",) * 3, ("triforce",) * 3, ("ar", "retrieval", "triforce")])
def test_batched_greedy_equals_one_at_a_time(engine, prompts, modes):
    runs = [config(engine, mode=mode) for mode in modes]
    alone = [engine.generate(p, r).token_ids for p, r in zip(prompts, runs)]
    outcome = generate_batch(engine, prompts, runs)
    assert [r.token_ids for r in outcome.results] == alone
    assert outcome.packed_rows["target"] > outcome.passes["target"]   # passes really served several sequences


def test_slots_refill_as_sequences_finish(engine, prompts):
    """Continuous batching: 3 prompts in 2 slots, the third starts when a slot frees (its prefill
    packs with the other's passes); every sequence still gives exactly its tokens alone."""
    runs = [config(engine, mode=mode, max_new_tokens=n) for mode, n in (("triforce", 4), ("ar", 10), ("triforce", 8))]
    alone = [engine.generate(p, r).token_ids for p, r in zip(prompts, runs)]
    outcome = generate_batch(engine, prompts, runs, slots=2)
    assert [r.token_ids for r in outcome.results] == alone
    passes, rows = outcome.passes["target"], outcome.packed_rows["target"]
    assert passes < rows <= 2 * passes   # packed, never more than 2 sequences a pass


def test_batched_gamma_auto_keeps_its_pass_costs_to_the_batch(engine, prompts, monkeypatch, tmp_path):
    """A packed pass costs more than a lone one: --gamma auto's costs measured in a batch are the
    batch's own, neither kept on the engine nor stored for later lone requests."""
    monkeypatch.setenv("TRIFORCE_CACHE", str(tmp_path))
    runs = [config(engine, mode="triforce", gamma="auto", gamma1=None, gamma2=None, max_new_tokens=6)] * 2
    known = dict(engine.pass_costs)
    alone = [engine.generate(p, r).token_ids for p, r in zip(prompts[:2], runs)]
    assert engine.pass_costs != known and list((tmp_path / "pass_costs").iterdir())   # lone requests keep theirs
    kept, stored = dict(engine.pass_costs), {f: f.read_bytes() for f in (tmp_path / "pass_costs").iterdir()}
    outcome = generate_batch(engine, prompts[:2], runs)
    assert [r.token_ids for r in outcome.results] == alone
    assert all(r.stats["gamma"]["policy"] == "auto" and not r.stats["gamma"]["probe_reused"] for r in outcome.results[:1])
    assert engine.pass_costs == kept and {f: f.read_bytes() for f in (tmp_path / "pass_costs").iterdir()} == stored


def test_batched_seeded_sampling_equals_one_at_a_time(engine, prompts):
    runs = [config(engine, mode="triforce", temperature=0.8, top_p=0.9, seed=i, max_new_tokens=8)
            for i in range(len(prompts))]
    alone = [engine.generate(p, r).token_ids for p, r in zip(prompts, runs)]
    assert [r.token_ids for r in generate_batch(engine, prompts, runs).results] == alone


def test_replica_batch_mixes_modes_and_keeps_bad_records_apart(default_model_dir, tmp_path, one_thread):
    replica = Replica({"model": str(default_model_dir), "max_new_tokens": 6, "batch_size": 3})
    (tmp_path / "long.txt").write_text("and it came to pass " * 2500)
    jobs = [{"line": 1, "id": "a", "prompt": "The LORD is my shepherd;", "params": {}},
            {"line": 2, "id": "b", "prompt_file": str(tmp_path / "long.txt"), "params": {}},
            {"line": 3, "id": "c", "prompt": "In the beginning God created",
             "params": {"max_new_tokens": 4, "mode": "retrieval"}}]
    a, b, c = unpack(replica.run(pack({"jobs": jobs})))["results"]
    assert b["status"] == "error" and "8192" in b["error"]
    assert a["stats"]["batch"] == c["stats"]["batch"] == 2            # one batch ...
    assert list(a["stats"]["levels"]) == ["target"]                   # ... of two modes: ar
    assert list(c["stats"]["levels"]) == ["retrieval", "target"]      # and retrieval
    for record, job in ((a, jobs[0]), (c, jobs[2])):
        alone = replica.engine.generate(replica.engine.encode(job["prompt"]),
                                        RunConfig(**{"max_new_tokens": 6, **job["params"]}))
        assert record["token_ids"] == alone.token_ids


def test_replica_call_with_more_jobs_than_slots(default_model_dir, one_thread):
    """`triforce batch --batch-size 2` hands a replica up to 2 x JOBS_PER_SLOT jobs a call: they
    decode 2 at a time, slots refilling, each record as it would be alone."""
    from triforce.runtime.batch_replicas import JOBS_PER_SLOT, jobs_per_call
    assert jobs_per_call(1) == 1 and jobs_per_call(2) == 2 * JOBS_PER_SLOT
    replica = Replica({"model": str(default_model_dir), "max_new_tokens": 5, "batch_size": 2})
    jobs = [{"line": i + 1, "id": str(i), "prompt": text, "params": {"max_new_tokens": 3 + i}}
            for i, text in enumerate(["The LORD is my shepherd;", "In the beginning God created", "Blessed is the man"])]
    records = unpack(replica.run(pack({"jobs": jobs})))["results"]
    assert [r["status"] for r in records] == ["ok"] * 3 and [r["stats"]["batch"] for r in records] == [2] * 3
    for record, job in zip(records, jobs):
        alone = replica.engine.generate(replica.engine.encode(job["prompt"]), RunConfig(**job["params"]))
        assert record["token_ids"] == alone.token_ids


def test_batched_with_streamed_weights_and_offloaded_kv_equals_one_at_a_time(default_model_dir, cut_drafter, prompts):
    """The packed pass is the model's own forward, so a model whose layers stream their weights
    (offload_weights) batches too, with each sequence's KV partly in the host tier."""
    streamed = Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter),
                                offload_weights=True))
    runs = [config(streamed, mode=mode, on_chip_layers=11) for mode in ("ar", "triforce", "triforce")]
    alone = [streamed.generate(p, r).token_ids for p, r in zip(prompts, runs)]
    outcome = generate_batch(streamed, prompts, runs)
    assert [r.token_ids for r in outcome.results] == alone
    assert all(r.stats["offload"]["offload_weights"] for r in outcome.results)
    assert outcome.packed_rows["target"] > outcome.passes["target"]
