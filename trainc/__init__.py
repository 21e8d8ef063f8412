"""trainc: a declarative configuration compiler and launcher for distributed LLM training.

The compile path (``trainc compile`` / ``trainc lint``) imports only the standard library, Hydra,
OmegaConf, Jinja2 and PyYAML; torch, deepspeed and megatron are imported lazily by the worker.
"""

__version__ = "0.1.0"
