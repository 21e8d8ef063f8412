"""Round host-side figures the offload estimates share (CPU optimizer steps and PCIe copies of
DeepSpeed's ZeRO-Offload, :func:`.time.offload_seconds`, and FSDP2's ``CPUOffloadPolicy``,
:func:`.fsdp.offload_seconds`). They are not cluster keys: read what they give as a floor."""

from __future__ import annotations

#: Host bytes DeepSpeed's CPU Adam streams per parameter per step: it reads the fp32 master
#: weight, its fp32 gradient and Adam's two moments and writes weight and moments back (the
#: update DeepSpeed's ``DeepSpeedCPUAdam``, ``deepspeed/ops/adam/cpu_adam.py``, runs per
#: element), and writes the 16-bit copy the GPU gets back: 16 + 12 + 2 bytes.
CPU_ADAM_BYTES_PER_PARAM = 30
#: Host memory bandwidth of one node that the ranks' CPU optimizer steps share, bytes/s: a round
#: figure for a two-socket server (DDR4-3200 x 8 channels x 2 sockets is 410 GB/s peak; STREAM
#: reaches about half). Not a cluster key: the step is a lower bound on what offload costs.
HOST_MEMORY_BYTES_PER_S = 200e9
#: Host <-> GPU bytes/s per GPU, one direction: PCIe Gen4 x16 (32 GB/s) at about 80 %.
PCIE_BYTES_PER_S = 25e9
