#!/usr/bin/env bash
# The verl backend on a Ray cluster (vLLM rollout + FSDP2 actor). verl drives every GPU of the cluster from one
# driver process, so: start Ray on every node, then run `twinrun train` once, on the head node.
#
#   head:    ROLE=head   experiments/cluster/verl-launch.sh
#   workers: ROLE=worker HEAD_ADDR=10.0.0.1 experiments/cluster/verl-launch.sh
#   head:    ROLE=train  experiments/cluster/verl-launch.sh          (after every worker joined)
#
# Required: ALFWORLD_DATA on every node, the executor/judge endpoints the spec names (keys in the spec's
# api_key_env variables). Optional: NUM_NODES (2), GPUS_PER_NODE (8), RAY_PORT (6379), SPEC, OUT, EXTRA.
set -euo pipefail
NUM_NODES="${NUM_NODES:-2}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
RAY_PORT="${RAY_PORT:-6379}"
SPEC="${SPEC:-experiments/skillos-alfworld-qwen3-8b.yaml}"
OUT="${OUT:-runs/skillos-alfworld-qwen3-8b-verl}"
case "${ROLE:?ROLE=head|worker|train}" in
  head)   exec ray start --head --port "$RAY_PORT" --num-gpus "$GPUS_PER_NODE" --disable-usage-stats ;;
  worker) exec ray start --address "${HEAD_ADDR:?}:$RAY_PORT" --num-gpus "$GPUS_PER_NODE" --disable-usage-stats ;;
  train)
    exec python -m twinrun.cli train "$SPEC" --backend verl --out "$OUT" \
      --set "resources.nodes=$NUM_NODES" --set "resources.gpus_per_node=$GPUS_PER_NODE" \
      --set "resources.ray_address=auto" ${EXTRA:-} ;;
  *) echo "ROLE must be head, worker or train" >&2; exit 2 ;;
esac
