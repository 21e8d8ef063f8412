"""Ecosystem adapters: Hugging Face import, JSON Schema, SARIF / GitHub renderers, spec diff,
progress display. Nothing here is on the compile path; each module is imported lazily by the CLI."""
