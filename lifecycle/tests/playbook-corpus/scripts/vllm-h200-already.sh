#!/usr/bin/env bash
# A single-node vLLM launch script in the shape of the benchmark
# repository's benchmarks/single_node/ scripts (written for this corpus).
source "$(dirname "$0")/../../benchmark_lib.sh"

check_env_vars MODEL TP CONC ISL OSL MAX_MODEL_LEN RESULT_FILENAME

SERVER_LOG=/workspace/server.log
export VLLM_ENGINE_READY_TIMEOUT_S=3600

set -x
export VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0
vllm serve $MODEL --host 0.0.0.0 --port $PORT \
--trust-remote-code \
--kv-cache-dtype fp8 \
--tensor-parallel-size "$TP" \
--gpu-memory-utilization 0.90 \
--max-num-seqs 512 \
--max-model-len $MAX_MODEL_LEN > $SERVER_LOG 2>&1 &

SERVER_PID=$!
wait_for_server_ready --port "$PORT" --server-log "$SERVER_LOG" --server-pid "$SERVER_PID"
run_benchmark_serving --model "$MODEL" --port "$PORT" --max-concurrency "$CONC" --result-filename "$RESULT_FILENAME"
