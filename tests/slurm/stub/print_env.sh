#!/usr/bin/env bash
# Stands in for torchrun (TORCHRUN=.../print_env.sh): prints what one srun task sees, one line.
echo "env-probe: slurm_nodeid=${SLURM_NODEID:-} node_rank=${NODE_RANK:-} node=${SLURMD_NODENAME:-}" \
  "master_addr=${MASTER_ADDR:-} master_port=${MASTER_PORT:-} rdzv=${TRAINC_RDZV_BACKEND:-}" \
  "spec_env=${TRAINC_SPEC_MARK:-} submit_env=${TRAINC_SUBMIT_MARK:-} omp=${OMP_NUM_THREADS:-}" \
  "args=$*"
