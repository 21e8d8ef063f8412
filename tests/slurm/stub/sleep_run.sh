#!/usr/bin/env bash
# Stands in for torchrun: a run that takes a while on the first start and is quick after a requeue.
echo "run: node=${SLURM_NODEID:-} restart=${SLURM_RESTART_COUNT:-0}"
if [[ "${SLURM_RESTART_COUNT:-0}" == 0 ]]; then sleep 60; else sleep 1; fi
