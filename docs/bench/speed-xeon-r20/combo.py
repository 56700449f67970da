"""Round 20: every local setting combination on tiny random checkpoints (dtype x placement x mode x
temperature x gamma x middle weights) must finish or refuse with a UserError; prints the rest.
    python docs/bench/speed-xeon-r20/combo.py [WORKDIR]   (352 combinations, 0 failures in round 20)"""
import itertools, json, sys, traceback, pathlib
from triforce.runtime.bench.random_weights import random_checkpoint, random_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/combo"); root.mkdir(parents=True, exist_ok=True)
shape = dict(architectures=["LlamaForCausalLM"], vocab_size=320, intermediate_size=96, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0)
(root / "t.json").write_text(json.dumps(dict(shape, hidden_size=64, num_hidden_layers=4)))
(root / "d.json").write_text(json.dumps(dict(shape, hidden_size=32, num_hidden_layers=1)))
T, D = str(random_checkpoint(root / "t.json")), str(random_checkpoint(root / "d.json"))
ids = random_ids(320, 300)
engines = {}
fails = []
n = 0
for dtype, place, mode, temp, gamma, mw in itertools.product(
        ["fp32", "bf16"], ["resident", "chip2", "weights", "auto"], ["ar", "spec", "retrieval", "streaming", "triforce"],
        [0.0, 0.7], [None, "auto"], ["auto", "same", "int8", "int4"]):
    if mw != "auto" and mode not in ("retrieval", "triforce"):
        continue
    eng_kw = dict(model=T, draft_model=D, dtype=dtype)
    if place == "weights": eng_kw["offload_weights"] = True
    if place == "auto": eng_kw["offload"] = "auto"
    run_kw = dict(eng_kw, mode=mode, temperature=temp, max_new_tokens=12, retrieval_budget=64, chunk_size=8,
                  middle_weights=mw, seed=3)
    if gamma: run_kw["gamma"] = gamma
    if place == "chip2": run_kw["on_chip_layers"] = 2
    n += 1
    try:
        key = tuple(sorted(eng_kw.items()))
        if key not in engines:
            engines[key] = Engine(RunConfig(mode="triforce", **eng_kw))
        run = RunConfig(**run_kw).validate()
        engines[key].generate(ids, run)
    except Exception as e:
        msg = f"{dtype} {place} {mode} T={temp} gamma={gamma} mw={mw}: {type(e).__name__}: {str(e)[:200]}"
        if "UserError" not in type(e).__name__:
            fails.append(msg + "\n" + traceback.format_exc()[-800:])
        else:
            print("usererror:", msg)
print(n, "combos;", len(fails), "failures")
for f in fails[:10]:
    print(f)
