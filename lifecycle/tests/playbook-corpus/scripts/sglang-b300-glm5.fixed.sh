#!/usr/bin/env bash
# An SGLang launch on B300 (written for this corpus).
export SGLANG_ENABLE_SPEC_V2=1

if [[ -n "$SLURM_JOB_ID" ]]; then
  echo "JOB $SLURM_JOB_ID running on $SLURMD_NODENAME"
fi

export SGL_ENABLE_JIT_DEEPGEMM=0
PYTHONNOUSERSITE=1 python3 -m sglang.launch_server --model-path $MODEL --host 0.0.0.0 --port $PORT \
  --tp "$TP" --mem-fraction-static 0.85 --cuda-graph-max-bs 256 > $SERVER_LOG 2>&1 &
SERVER_PID=$!
