#!/bin/sh
# A stand-in for nvidia-smi on a host with one NVIDIA H200 (tests/gpu): it answers the
# queries the agent makes (agent/server/gpus.py) and `-L` as the real tool prints them, with
# the H200's real figures. The GPU is "busy" (97%, 20 GiB) while a process whose command
# line holds dockyard-fake-gpu-load runs (scripts/gpu_check.py --fake-load starts one).
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-5a5a5a5a-0000-4000-8000-fa4efa4efa4e)" ;;
  *index,name,memory.total*) echo "0, NVIDIA H200, 143771" ;;
  *index,utilization.gpu,memory.used*)
    # the bracket keeps this grep's own command line from matching
    if grep -qs 'dockyard-fake-gpu-loa[d]' /proc/[0-9]*/cmdline; then
      echo "0, 97, 20480"
    else
      echo "0, 0, 0"
    fi ;;
  *) echo "NVIDIA-SMI (fake) Driver Version: 550.00 CUDA Version: 12.4" ;;
esac
