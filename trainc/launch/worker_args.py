"""The trainc worker's command line (``python -m trainc.launch.worker --plan plan.json ...``):
its own module, so ``trainc run`` checks the flags after ``--`` with the worker's parser
without importing the worker's engines (torch, Megatron-Core, DeepSpeed)."""

from __future__ import annotations

import argparse

#: The worker's one-line description (``--help``).
DESCRIPTION = "The trainc worker: what every rank runs."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's command line (the generated scripts pass ``--plan``; the rest is optional)."""
    p = argparse.ArgumentParser(prog="trainc.launch.worker", description=DESCRIPTION)
    p.add_argument("--plan", required=True, help="plan.json written by trainc compile")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: spec.launch.device")
    p.add_argument(
        "--shrink",
        action="store_true",
        default=None,
        help="tiny dimensions, same layout (default: spec.launch.shrink)",
    )
    p.add_argument("--train-iters", type=int, help="default: spec.training.train_iters")
    p.add_argument(
        "--save",
        help="checkpoint directory (default: spec.launch.save_dir, else <plan dir>/checkpoints)",
    )
    p.add_argument("--save-interval", type=int, help="default: spec.launch.save_interval")
    p.add_argument(
        "--load",
        help="resume from the latest checkpoint in this directory; 'auto': "
        "the checkpoint directory (--save), when it holds one (launch.requeue)",
    )
    p.add_argument(
        "--data-path",
        help="indexed dataset prefix (default: spec.launch.data_path, "
        "else Megatron-Core's mock dataset)",
    )
    p.add_argument("--lr", type=float, help="default: spec.training.lr")
    p.add_argument(
        "--resume-check",
        type=int,
        metavar="STEP",
        help="after training, reload the checkpoint of STEP and replay the remaining "
        "steps, logging them as 'resume-check step=...' (a resume self-test)",
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="one process, every parallel degree 1, same model and data",
    )
    p.add_argument(
        "--timeout-s", type=float, help="collective timeout (default 120 on cpu, 1800 on cuda)"
    )
    return p.parse_args(argv)
