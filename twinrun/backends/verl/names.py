"""Names shared by the verl backend's modules (no imports: train.py and compile.py stay light)."""

AGENT_LOOP_NAME = "twinrun_curator"  # verl agent-loop registry name (plugin.py registers it)
AGENT_LOOP_CLASS = "twinrun.backends.verl.agent_loop.CuratorAgentLoop"
MANAGER_CLASS = "twinrun.backends.verl.loop_manager.CuratorAgentLoopManager"  # rollout.agent.agent_loop_manager_class
CHECKPOINT_CALLBACK = "twinrun.backends.verl.callback.MergeToHFCallback"  # trainer.checkpoint_callback_class
RUN_DIR_KEY = "twinrun_run_dir"  # trainer.twinrun_run_dir: the run directory (neutral layout) the callback writes
ROLLOUT_NAME = "hf"  # actor_rollout_ref.rollout.name of the transformers rollout
TRAINER_MODE = "twinrun_rows"  # trainer.v1.trainer_mode: verl's sync trainer with mini-batches in rows (rows_trainer.py)
ROWS_PER_ROLLOUT_KEY = "twinrun_rows_per_rollout"  # trainer.<key>: |G| (per_position) or 1 (accumulated)
ROW_TOKENS_KEY = "twinrun_row_tokens"  # trainer.<key>: rows.jsonl keeps token ids and messages (tests)
MESSAGES_FIELD = "twinrun_messages"  # AgentLoopOutput.extra_fields: the row's prompt messages (row tokens kept)
