"""Context lookup: drafts copied from the sequence itself (prompt lookup decoding, as llama.cpp's
lookup decoding and vLLM's n-gram speculator do), a proposer that costs no forward pass.

When the last NGRAM tokens of the sequence occurred earlier, the tokens that followed that earlier
occurrence are a guess at what comes next. Long outputs over long contexts copy a lot (names,
code, quotations, a summary's phrases, and a small model's own loops), and there the guess runs
for many tokens at once.

A level that verifies (the target, the middle level) takes the copied tokens as its draft in place
of the levels below when the match is long enough (verify_round): the draft's q is one-hot at each
copied token, a function of the sequence alone, so the acceptance rule keeps the output exactly
the verifier's (accept.py: any q works). A miss costs the verifier one pass that emits 1 token, so
the full target trusts a match only from TARGET_MATCH tokens (the levels below, whose
passes are cheap, from NGRAM), and copies at most as many tokens as
matched: a sequence that has repeated itself for L tokens tends to go on, a 3-token echo rarely.
Under --gamma auto the full target also takes no more than pays for its wider pass
(gamma.copy_length, SpecDecoder.copy_cap).
"""
from __future__ import annotations

NGRAM = 3                # tokens the sequence's end must share with an earlier place (the index key)
MAX_TOKENS = 16          # tokens copied per round at most (a verify pass of 17 tokens)
TARGET_MATCH = 8         # the full target's least match length to take a copy (the levels below: NGRAM)


class ContextLookup:
    """Where each NGRAM-gram of the committed sequence last began with a token after it."""

    def __init__(self) -> None:
        self.last: dict[tuple[int, ...], int] = {}   # gram -> its latest start j (seq[j + NGRAM] exists)
        self.indexed = 0                              # grams starting before this are in `last`

    def extend(self, seq: list[int]) -> None:
        """Indexes the grams of `seq` (the committed sequence; it only grows) not yet seen."""
        for j in range(self.indexed, len(seq) - NGRAM):
            self.last[tuple(seq[j:j + NGRAM])] = j
        self.indexed = max(self.indexed, len(seq) - NGRAM)

    def copy(self, seq: list[int], room: int, min_match: int) -> list[int]:
        """Up to min(room, MAX_TOKENS, match length) tokens that followed the latest earlier
        occurrence of seq's last NGRAM tokens, if seq's end matches there for at least min_match
        tokens; else []. seq extends the indexed sequence (drafted tokens may follow it)."""
        if room <= 0 or len(seq) <= NGRAM:
            return []
        j = self.last.get(tuple(seq[-NGRAM:]))   # an earlier start (the end's own gram is not indexed)
        if j is None:
            return []
        longest, end, match = min(MAX_TOKENS, room), len(seq) - NGRAM, NGRAM
        while match < max(min_match, longest) and j - (match - NGRAM) > 0 and \
                seq[j - (match - NGRAM) - 1] == seq[end - (match - NGRAM) - 1]:   # the match, extended backwards
            match += 1
        if match < min_match:
            return []
        start = j + NGRAM
        return seq[start:start + min(longest, match)]
