import json, sys
for r in ["old_1", "new_1", "old_2", "new_2"]:
    d = json.load(open(f"{sys.argv[1]}/{r}/modes.json"))
    out = []
    for row in d["rows"]:
        g = row.get("gamma", {})
        s = f'{row["mode"]}@{row["temperature"]}: {row["ms_per_token"]["median"]:.1f} ms/tok'
        if g:
            total = row["prefill_s"]["median"] + g["probe_s"]["median"] + row["ms_per_token"]["median"] * row["new_tokens"] / 1000
            s += f' prefill {row["prefill_s"]["median"]:.2f}s probe {g["probe_s"]["median"]:.2f}s lower+probe+decode {total:.2f}s tpp {row["tokens_per_target_pass"]:.2f} acc {row.get("acceptance")} choices {dict(list(g["rounds_per_choice"].items())[:3])}'
        else:
            s += f' decode {row["ms_per_token"]["median"] * row["new_tokens"] / 1000:.2f}s'
        out.append(s)
    print(r, "\n   " + "\n   ".join(out))
