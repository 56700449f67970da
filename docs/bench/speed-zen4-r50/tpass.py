"""Every pass's (T, ms) per level over ROUNDS triforce requests (the drafter's window prefill at each request's start
included): python tpass.py S T NEW ROUNDS"""
import os, sys, dataclasses, time, collections, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import speculate, gamma
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
rec = collections.defaultdict(list)
orig = speculate.PassTimes.add
cur = {}
def add(self, T, s):
    rec[(cur.get(id(self), "?"), T)].append(s * 1000)
    orig(self, T, s)
speculate.PassTimes.add = add
orig_init = speculate.Level.__init__
def init(self, name, *a, **k):
    orig_init(self, name, *a, **k)
    cur[id(self.times)] = name
speculate.Level.__init__ = init
orig_reset = speculate.Level.reset_stats
def reset(self):
    orig_reset(self); cur[id(self.times)] = self.name
speculate.Level.reset_stats = reset
eng.generate(ids, run)
rec.clear()
for r in range(R):
    st = eng.generate(ids, dataclasses.replace(run, seed=r)).stats
    print(st["ms_per_token"], st["gamma"]["rounds_per_choice"], flush=True)
for (name, t), v in sorted(rec.items()):
    print(f"{name:10s} T={t:2d} n={len(v):3d} median {statistics.median(v):7.2f} mean {statistics.mean(v):7.2f} sum {sum(v):8.1f}")
