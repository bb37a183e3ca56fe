#!/usr/bin/env bash
set -eo pipefail

# Demo-V4 on B200 via vLLM (the demo repository's one benchmark script; the
# CI simulator never runs it, Klaud's playbook repairs edit it).

source "$(dirname "$0")/../../benchmark_lib.sh"

check_env_vars MODEL TP CONC ISL OSL MAX_MODEL_LEN RESULT_FILENAME

if [[ -n "$SLURM_JOB_ID" ]]; then
  echo "JOB $SLURM_JOB_ID running on $SLURMD_NODENAME"
fi

SERVER_LOG=/workspace/server.log

set -x
vllm serve $MODEL --port $PORT \
    --tensor-parallel-size $TP \
    --gpu-memory-utilization 0.95 \
    --max-model-len $MAX_MODEL_LEN \
    --kv-cache-dtype fp8 > $SERVER_LOG 2>&1 &

SERVER_PID=$!
wait_for_server_ready --port "$PORT" --server-log "$SERVER_LOG" --server-pid "$SERVER_PID"

run_benchmark_serving \
    --model "$MODEL" \
    --port "$PORT" \
    --input-len "$ISL" \
    --output-len "$OSL" \
    --max-concurrency "$CONC" \
    --result-filename "$RESULT_FILENAME"
