#!/usr/bin/env bash
# A ROCm vLLM launch script with its memory fraction in a bash array.
export VLLM_ROCM_USE_AITER=1
export HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7

GMU_ARGS=(--gpu-memory-utilization 0.90)
if [ "${EVAL_ONLY}" = "true" ]; then
    MAX_MODEL_LEN_ARG="--max-model-len $EVAL_MAX_MODEL_LEN"
fi

vllm serve $MODEL --port $PORT --tensor-parallel-size "$TP" "${GMU_ARGS[@]}" $MAX_MODEL_LEN_ARG > $SERVER_LOG 2>&1 &
SERVER_PID=$!
