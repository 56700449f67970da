import json, sys, glob, os
runs = sys.argv[2:] if len(sys.argv) > 2 else ["old_1", "new_1", "old_2", "new_2"]
d = {r: json.load(open(f"{sys.argv[1]}/{r}/passes.json")) for r in runs}
keys = [(x["context"], x["level"], x["T"]) for x in d[runs[0]]["rows"]]
print("ctx level T | " + " | ".join(runs))
for k in keys:
    print(*k, "|", " | ".join(f'{next(x["ms"] for x in d[r]["rows"] if (x["context"], x["level"], x["T"]) == k):7.2f}' for r in runs))
print("bw", [d[r]["read_bandwidth_gbs"] for r in runs])
