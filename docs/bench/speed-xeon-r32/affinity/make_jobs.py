"""Three questions over each of two documents (16,000 characters of the essays each, ~3,800 SmolLM2
tokens), in the order d1 d1 d2 d1 d2 d2: python make_jobs.py > jobs.jsonl; then, each in a fresh output:
    triforce batch --input jobs.jsonl --output out.jsonl --replicas 2 --prefix-cache --mode ar --dtype bf16 --max-new-tokens 16"""
import json
from triforce.runtime.assets import essays_text
text = essays_text()
docs = {"d1": text[:16000], "d2": text[40000:56000]}
questions = ["What is the main argument?", "Which startups are mentioned?", "What does the author say about hackers?",
             "Summarize the last paragraph.", "Who is the audience?", "What is the tone?"]
for n, d in enumerate(["d1", "d1", "d2", "d1", "d2", "d2"]):
    print(json.dumps({"id": f"{d}-q{n}", "prompt": f"{docs[d]}\n\nQuestion: {questions[n]}\nAnswer:"}))
