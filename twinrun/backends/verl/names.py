"""Names shared by the verl backend's modules (no imports: train.py and compile.py stay light)."""

AGENT_LOOP_NAME = "twinrun_curator"  # verl agent-loop registry name (plugin.py registers it)
AGENT_LOOP_CLASS = "twinrun.backends.verl.agent_loop.CuratorAgentLoop"
MANAGER_CLASS = "twinrun.backends.verl.loop_manager.CuratorAgentLoopManager"  # rollout.agent.agent_loop_manager_class
CHECKPOINT_CALLBACK = "twinrun.backends.verl.callback.MergeToHFCallback"  # trainer.checkpoint_callback_class
RUN_DIR_KEY = "twinrun_run_dir"  # trainer.twinrun_run_dir: the run directory (neutral layout) the callback writes
ROLLOUT_NAME = "hf"  # actor_rollout_ref.rollout.name of the transformers rollout
