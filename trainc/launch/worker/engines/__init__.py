"""The worker's training loops, one module per engine (``spec.engine``): :mod:`.megatron`
(Megatron-Core DDP, optimizer and schedules), :mod:`.deepspeed` (``deepspeed.initialize``) and
:mod:`.fsdp` (FSDP2 on a DeviceMesh). Each has ``run(settings)`` and is registered in
:data:`trainc.launch.WORKER_ENGINES`; all build on :mod:`trainc.launch.worker.runtime` and import
nothing from each other or from :mod:`trainc.launch.worker.main`."""
