#!/usr/bin/env bash
# The scale model's check on a lent 16-core machine, in one call (docs/study-scale.md, "What a 16-core run must measure"):
#   run(command="bash benchmarks/device/scale_model_16.sh", carry=["wheelhouse-device"], timeout_s=600)
# It needs hivemind 1.1.12 and its dependencies as wheels for the machine's Python in wheelhouse-device/
# (pip download --python-version 3.12 --only-binary=:all: -d wheelhouse-device hivemind==1.1.12; its own torch
# stays). It measures, with the current code (OpenMP threads passive, as the trainer unit runs them):
#   1. base, p2, p4 and p16 solo/luoff at 100 steps with the study's settings (the rows to refresh), and from
#      them a calibration with the Hivemind compute ratios at 8, 4 and 1 threads ($OUT/calibration.json);
#   2. p2-luoff with parameter rounds off (--average-state-every 1000): how much is the background round;
#   3. p2 solo/luoff with OMP_WAIT_POLICY unset (GNU OpenMP's default, as on 2026-11-23): the spin's part.
# Each block is a --out of its own under $OUT; the tables print as they finish, so a cut-off call keeps
# what was done. Compare with the local model: benchmarks/calibration_check.py, docs/compute-calibration.md.
set -euo pipefail
OUT=${OUT:-/tmp/scale-model-16}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if ! "$PY" -c "import hivemind" 2>/dev/null; then
  "$PY" -m venv --system-site-packages /tmp/venv56
  /tmp/venv56/bin/pip install --quiet --no-index --find-links wheelhouse-device hivemind==1.1.12
  PY=/tmp/venv56/bin/python
fi
"$PY" -c "import torch, hivemind, os; print('torch', torch.__version__, 'hivemind', hivemind.__version__, 'cores', os.cpu_count())"
common=(--total-vcpus 16 --local-updates off --matchmaking-time 2 --steps 100 --timeout 200)
run() {  # seconds, name, then study_scale.py's arguments
  local seconds=$1 name=$2; shift 2
  timeout "$seconds" "$PY" benchmarks/study_scale.py "${common[@]}" --out "$OUT/$name" "$@" \
    | tee "$OUT/$name.txt" || true
}
run 330 passive --peers 2,4,16 --only base,p2-solo,p2-luoff,p4-solo,p4-luoff,p16-solo,p16-luoff \
  --calibration-out "$OUT/calibration.json"
run 90 passive-ase1000 --peers 2 --only p2-solo,p2-luoff --average-state-every 1000
run 90 unset --peers 2 --only p2-solo,p2-luoff --omp-wait-policy unset
