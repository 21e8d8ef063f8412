"""Support modules the passes use that are not passes themselves.

Atomic output writing, number formatting, Slurm time strings, secret redaction, hardware
facts, tree copies.
"""
