#!/usr/bin/env bash
# Stands in for torchrun: node rank 1 fails at once (exit 3), the others block (as ranks waiting in
# a collective for a peer that died would) for up to TRAINC_STUB_HANG_S seconds.
if [[ "${SLURM_NODEID:-0}" == 1 ]]; then echo "node 1: failing"; exit 3; fi
echo "node ${SLURM_NODEID:-0}: waiting for the failed peer"
sleep "${TRAINC_STUB_HANG_S:-120}"
