# Round 38: a modes run with every --gamma auto probe pass logged (level, T, ms; the retrieval level timed twice more),
# the second 2-token probe of the retrieval level profiled (cProfile), and gc collections over 2 ms printed.
# usage: python probe_log.py bench --suite modes ... (the CLI arguments)
# Logs every probe pass (level, T, ms) of a real run, then runs the CLI with the given arguments.
import sys, time, gc, triforce.runtime.gamma as g
_t = {}
def _cb(phase, info):
    if phase == "start": _t['s'] = time.perf_counter()
    elif info['generation'] == 2 or time.perf_counter() - _t['s'] > 0.002:
        print(f"[gc] gen {info['generation']} {1000 * (time.perf_counter() - _t['s']):.1f} ms collected {info['collected']}", file=sys.stderr, flush=True)
gc.callbacks.append(_cb)
orig = g.pass_seconds
_n = [0]
def logged(level, T):
    if getattr(level, 'name', '') == 'retrieval' and T == 2:
        _n[0] += 1
        if _n[0] == 2:
            import cProfile, pstats, io
            pr = cProfile.Profile(); pr.enable(); s0 = orig(level, T); pr.disable()
            out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats('tottime').print_stats(12); print(out.getvalue()[:3000], file=sys.stderr)
    s = orig(level, T)
    extra = [orig(level, T) for _ in range(2)] if getattr(level, 'name', '') == 'retrieval' else []
    print(f"[probe] {getattr(level, 'name', '?')} T={T} {1000 * s:.2f} ms, again: " + " ".join(f"{1000 * e:.2f}" for e in extra), file=sys.stderr, flush=True)
    return s
g.pass_seconds = logged
from triforce.runtime.cli import main
sys.exit(main(sys.argv[1:]))
