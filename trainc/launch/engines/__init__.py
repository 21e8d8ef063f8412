"""The worker's training loops, one module per engine (``spec.engine``): :mod:`.megatron`
(Megatron-Core DDP, optimizer and schedules) and :mod:`.deepspeed` (``deepspeed.initialize``).
Each has ``run(settings)``; both build on :mod:`trainc.launch.runtime` and import nothing from
each other or from :mod:`trainc.launch.worker`."""
