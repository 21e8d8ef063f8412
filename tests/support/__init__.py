"""Helpers shared by the tests (no test lives here); import them as ``tests.support.NAME``.

- :mod:`.kit`: build specs in memory (no Hydra), lint them, query diagnostics as data;
- :mod:`.kit_strategies`: hypothesis strategies of valid and invalid spec dicts over the kit;
- :mod:`.spec_dicts`: hypothesis strategies of coherent spec dicts (the differential tests);
- :mod:`.differential`, :mod:`.divergences`: the libraries-as-oracles harness and
  docs/divergences.md read as a table;
- :mod:`.fuzzing`: fuzzed inputs and the in-process compile check;
- :mod:`.emit`: compile a golden case or a spec dict, write the files, run the scripts under stub
  ``torchrun`` / ``srun`` / ``scontrol``;
- :mod:`.estimate`: a hand-built spec and its plan with estimates;
- :mod:`.one_truth_table`, :mod:`.one_truth_specs`: the cross-artifact table and its checks, and
  the generated specs it is checked on;
- :mod:`.e2e`: launch real CPU training runs (tests/e2e);
- :mod:`.oracles`: run a CPU oracle script in a subprocess and read its JSON answer
  (tests/differential);
- :mod:`.slurm`: the Slurm tests' clients and skips (tests/slurm).
"""
