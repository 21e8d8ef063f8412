"""The rank side: what every rank runs under torchrun, reading ``plan.json`` only.

:mod:`.main` parses the command line and dispatches to the engine's training loop in
:mod:`.engines`; :mod:`.runtime` is what the loops share (process groups, logging, signals);
:mod:`.model`, :mod:`.torch_gpt`, :mod:`.data` and :mod:`.checkpoint` build what they train.
"""
