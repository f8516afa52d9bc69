#!/usr/bin/env bash
# One leg of text-to-image training on the lent GPU machine (see deploy/device/kit.py):
# run through the device tool with carry [".device-kit"] and timeout_s 560.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device-kit/wheels/*.whl
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 deploy/device/kit.py train --out "${OUT:?the device tool sets OUT}" --minutes "${MINUTES:-7}"
ls -l "$OUT"
