#!/usr/bin/env bash
# A vLLM script already at 0.90: the profiler must be turned off instead.
export VLLM_USE_FLASHINFER_MOE_FP4=1

set -x
export VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0
vllm serve $MODEL --port $PORT \
  --tensor-parallel-size "$TP" \
  --gpu-memory-utilization 0.90 \
  --max-num-seqs "$CONC" > $SERVER_LOG 2>&1 &
SERVER_PID=$!
