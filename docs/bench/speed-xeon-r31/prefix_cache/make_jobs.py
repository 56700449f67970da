"""Four questions over the first 30,000 characters of the essays (about 7,150 SmolLM2 tokens):
python make_jobs.py > jobs.jsonl; then, each in a fresh output:
    triforce batch --input jobs.jsonl --output out_plain.jsonl --mode triforce --dtype bf16 --max-new-tokens 32
    triforce batch --input jobs.jsonl --output out_prefix_cache.jsonl --mode triforce --dtype bf16 --max-new-tokens 32 --prefix-cache"""
import json
from triforce.runtime.assets import essays_text
doc = essays_text()[:30000]
for i, q in enumerate(["What is the main argument of the first essay?", "Which startups are mentioned?",
                       "What does the author say about hackers?", "Summarize the last paragraph."]):
    print(json.dumps({"id": f"q{i}", "prompt": f"{doc}\n\nQuestion: {q}\nAnswer:"}))
