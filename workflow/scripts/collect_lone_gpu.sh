#!/usr/bin/env bash
# Collect, on ONE GPU as found, the telemetry of the awaiting experiments that a lone GPU can give,
# in priority order, each collector under its own time limit, into OUTDIR:
#
#   l2.csv             gemm_sweep --plan l2      E1.3b (memory law across working sets in and out of L2)
#   cublaslt.log       dispatch                  E1.14 (cuBLASLt's tile / split-K per shape)
#   duty.csv           gemm_sweep --plan duty    E1.14 (tensor-pipe duty on the dense m ladder)
#   clock_sweep.csv    clock                     E1.7, E1.10 (sustained SM clock under GEMM load)
#   gemm_counters.csv  ncu                       E1.5 (Nsight Compute factors; a reduced cell set)
#   environment.txt    nvidia-smi -q before and after, torch / CUDA / ncu versions
#   collect.log        each step's command, exit code and seconds
#
# No GPU setting is changed (no power cap, no clock lock; ncu runs with --clock-control none).
# This is the script behind a short lease of a single GPU (a time budget of minutes, not the
# Slurm profile's hours), so the clock sweep holds each cell 2 s with 0.5 s between cells
# (config/collect.yaml's cluster setting is 3 s / 10 s) and the ncu cells are 8 of the 36;
# the settings used are written into collect.log. File the outputs where the reductions read them:
#   raw/telemetry/gemm_sweep/<GPU_KEY>/{l2,duty}.csv, raw/telemetry/dispatch/<GPU_KEY>/cublaslt.log,
#   raw/telemetry/clock/<GPU_KEY>/clock_sweep.csv, raw/telemetry/ncu/<GPU_KEY>/gemm_counters.csv,
# with environment.txt and collect.log beside them (provenance).
#
# usage: bash workflow/scripts/collect_lone_gpu.sh GPU_KEY OUTDIR
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 GPU_KEY OUTDIR (GPU_KEY: a steptime GPU key, e.g. h200-sxm)" >&2
    exit 2
fi
gpu=$1
out=$2
mkdir -p "$out" || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
for d in /opt/nvidia/nsight-compute/*/ /usr/local/cuda/bin/; do
    [ -x "$d/ncu" ] && ! command -v ncu >/dev/null && export PATH="$PATH:$d"
done
log="$out/collect.log"
env_txt="$out/environment.txt"
# the key reaches Python as an argument, never inside the code string (wave 42: a key holding a quote ran as Python)
python3 -c 'import sys, steptime.specs as s; print("steptime GPU:", s.get_gpu(sys.argv[1]).name)' "$gpu" >"$log" 2>&1 || {
    cat "$log" >&2
    exit 2
}

step() { # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name start $(date -u +%FT%TZ) limit ${limit}s: $*" >>"$log"
    timeout "$limit" "$@" >>"$log" 2>&1
    rc=$?
    echo "== $name rc=$rc seconds=$((SECONDS - t0))" >>"$log"
    echo "$name rc=$rc seconds=$((SECONDS - t0))"
}

{
    echo "# collected $(date -u +%FT%TZ) by workflow/scripts/collect_lone_gpu.sh $gpu"
    echo "# git: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'device', torch.cuda.get_device_name(0), 'props', torch.cuda.get_device_properties(0))"
    command -v ncu >/dev/null && ncu --version | tail -1
    echo "# nvidia-smi -q, before"
    nvidia-smi -q
} >"$env_txt" 2>&1

py=python3
step l2 60 $py -m steptime_collect.gemm_sweep --plan l2 --gpu "$gpu" --repeats 3 --out "$out/l2.csv"
step dispatch 60 $py -m steptime_collect.dispatch --gpu "$gpu" --out "$out/cublaslt.log"
step duty 180 $py -m steptime_collect.gemm_sweep --plan duty --gpu "$gpu" --repeats 3 --out "$out/duty.csv"
step clock 170 $py -m steptime_collect.clock --out "$out/clock_sweep.csv" --runs 5 --hold-s 2 --cool-s 0.5
step ncu 100 $py -m steptime_collect.ncu --out "$out/gemm_counters.csv" --m 1,256,4096,16384 \
    --shapes 4096x4096,28672x4096 --clock-control none
{
    echo "# nvidia-smi -q, after"
    nvidia-smi -q
} >>"$env_txt" 2>&1
ls -l "$out"
