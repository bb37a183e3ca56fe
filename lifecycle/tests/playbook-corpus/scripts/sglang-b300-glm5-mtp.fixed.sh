#!/usr/bin/env bash
# An SGLang launch with EAGLE speculative decoding on B300.
python3 -m sglang.launch_server --model-path $MODEL --port $PORT --tp "$TP" \
  --speculative-algorithm EAGLE --speculative-num-steps 3 \
  --cuda-graph-max-bs 64 --max-running-requests 128 \
  --mem-fraction-static 0.85 > $SERVER_LOG 2>&1 &
