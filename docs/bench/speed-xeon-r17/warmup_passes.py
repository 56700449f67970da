exec(open("docs/bench/speed-xeon-r17/split_harness.py").read().split("S = int(sys.argv[1])")[0])
import resource
S = int(sys.argv[1])
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 9)
    levels = built_levels(engine, run, ids, S)
    for name in sys.argv[2].split(","):
        level = levels[name]; m = level.model; cache = level.cache
        n = cache.get_seq_length()
        x = torch.tensor([ids[S:S + 1]])
        out = []
        for i in range(25):
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter(); m(x, cache); dt = (time.perf_counter() - t) * 1e3; cache.crop(n)
            out.append(f"{dt:.1f}/{resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}")
        print(name, " ".join(out), flush=True)
