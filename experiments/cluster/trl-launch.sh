#!/usr/bin/env bash
# Multi-node launch of the TRL backend (DeepSpeed ZeRO-3 through accelerate). Run the same command on every node.
# Required environment: NODE_RANK (0..NUM_NODES-1), MASTER_ADDR (node 0's address), ALFWORLD_DATA, and the
# executor/judge endpoints the spec names (their API keys in the spec's api_key_env variables).
# Optional: NUM_NODES (2), GPUS_PER_NODE (8), MASTER_PORT (29500), SPEC, OUT, EXTRA (more `twinrun train` flags).
set -euo pipefail
NUM_NODES="${NUM_NODES:-2}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
SPEC="${SPEC:-experiments/skillos-alfworld-qwen3-8b.yaml}"
OUT="${OUT:-runs/skillos-alfworld-qwen3-8b-trl}"
exec accelerate launch \
  --config_file experiments/cluster/trl-accelerate-zero3.yaml \
  --num_machines "$NUM_NODES" \
  --num_processes "$((NUM_NODES * GPUS_PER_NODE))" \
  --machine_rank "$NODE_RANK" \
  --main_process_ip "$MASTER_ADDR" \
  --main_process_port "${MASTER_PORT:-29500}" \
  -m twinrun.cli train "$SPEC" --backend trl --out "$OUT" \
  --set "resources.nodes=$NUM_NODES" --set "resources.gpus_per_node=$GPUS_PER_NODE" ${EXTRA:-}
