"""Shared pytest set-up: hypothesis profiles and the test kit on sys.path.

Profiles: ``dev`` (few examples, fast feedback) and ``ci`` (more examples, derandomized so a
failure replays). Select with HYPOTHESIS_PROFILE; the default is ``ci``.
"""

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

settings.register_profile("dev", max_examples=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
