"""The essays' first N tokens (the default model's tokenizer) as a prompt file: python prompt.py OUT N"""
import sys

from transformers import AutoTokenizer

from triforce.runtime import assets

tok = AutoTokenizer.from_pretrained(str(assets.default_model_dir()))
ids = tok(assets.essays_text()[:400_000])["input_ids"][:int(sys.argv[2])]
open(sys.argv[1], "w").write(tok.decode(ids))
