"""The worker's training loops, one module per engine (``spec.engine``): :mod:`.megatron`
(Megatron-Core DDP, optimizer and schedules) and :mod:`.deepspeed` (``deepspeed.initialize``).
Each has ``run(settings)``; all build on :mod:`trainc.launch.worker.runtime` and import nothing
from each other or from :mod:`trainc.launch.worker.main`."""
