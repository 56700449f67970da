"""`triforce distill`: train a drafter for a target by distillation on a text corpus.

Student: the target's first N decoder layers + its final norm, initialised from the target's
weights. Its embeddings and lm_head ARE the target's (tied in SmolLM2) and stay frozen, so a
stored drafter needs only the N layers and the norm (`export_compact`); the rest is shared with
the target and re-attached on load (runtime/drafter.py: `assemble_drafter`, `default_drafter_dir`).

Loss: KL(p_target || q_student) at temperature 1, averaged over every position of random
windows of the corpus; the teacher's logits are computed on the fly. Windows are short (default
256 tokens): in TriForce the drafter only ever reads a StreamingLLM cache of 16 sinks + ~240
recent tokens, so long-context skill is not needed.

Held-out text: the last 2% of the corpus' tokens, never sampled for training. For the KJV that is
2 Peter 2:13 to the end of Revelation (~23K tokens); the agreement metric is measured on
16 evenly spaced windows of it: top-1 agreement = how often argmax(student) == argmax(target),
which is the greedy acceptance rate of the drafter.

--init DIR starts a new run from an existing drafter's layers instead of the target's (to adapt a
drafter to new text). A checkpoint also records how often each token occurs in its training text
(token_counts.npy): --draft-vocab N keeps the N most frequent of those.

Budgets (--steps, --minutes) count the whole run, across --resume. The learning rate warms up
over --warmup steps, then follows a cosine over the fraction of the budget spent.

Modules, in the order a run uses them:
    config.py      DistillConfig: the run's settings
    corpus.py      text -> token ids (cached) -> training tokens and held-out windows
    student.py     the student, a cache-free forward over whole windows, the KL loss, held-out metrics
    checkpoint.py  one run per directory (lock), the saved run and its state for --resume
    train.py       the loop: prepare, step, measure, save; `distill()` runs it all
    export.py      the compact drafter (own tensors in bf16 + drafter.json manifest)
    command.py     the command line (`triforce distill`, `python -m triforce.runtime.distill`)
"""
