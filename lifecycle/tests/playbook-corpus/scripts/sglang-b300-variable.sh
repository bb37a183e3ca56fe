#!/usr/bin/env bash
# Batch limits computed from the concurrency: nothing literal to change.
CUDA_GRAPH_MAX_BATCH_SIZE=$CONC
MAX_RUNNING_REQUESTS=$CONC
python3 -m sglang.launch_server --model-path $MODEL --port $PORT --tp "$TP" \
  --speculative-algorithm EAGLE \
  --cuda-graph-max-bs $CUDA_GRAPH_MAX_BATCH_SIZE --max-running-requests $MAX_RUNNING_REQUESTS > $SERVER_LOG 2>&1 &
