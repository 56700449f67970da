"""The run settings that `generate` and `batch` share: a leaf module (rule 11), so that every
application reads the same list without importing another application."""

RUN_FLAGS = ("model", "chat", "max_new_tokens", "mode", "temperature", "top_p", "top_k", "seed", "dtype", "device", "cuda_graphs", "lookup",
             "prefill_chunk", "rope_scaling", "draft_model", "gamma1", "gamma2", "gamma", "retrieval_budget", "chunk_size",
             "retrieval_recent", "retrieval_rebuild", "middle_weights", "draft_weights", "draft_vocab", "draft_window", "draft_sinks", "on_chip_layers",
             "offload_weights", "offload")  # the RunConfig keys runtime.cli.add_run_args fills
