"""`kgrag train dpo` and `kgrag train accelerate-config`: the parser lives with the training code
(`kgrag_lib.train.cli`, also `python -m kgrag_lib.train`); this registers it under `kgrag train`."""

from __future__ import annotations

import argparse

from ..train.cli import __doc__ as DPO_DOC, accelerate_config, add_dpo_arguments, handle_dpo


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the generator with DPO (KG-Infused RAG §3.7)", description=DPO_DOC,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    train_sub = p.add_subparsers(dest="train_command", metavar="TRAIN_COMMAND", required=True)
    q = train_sub.add_parser("dpo", help="DPO on preference pairs (one process, or under accelerate launch)",
                             description=DPO_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dpo_arguments(q)
    q.set_defaults(func=handle_dpo)
    q = train_sub.add_parser("accelerate-config", help="print the path of a shipped accelerate config")
    q.add_argument("name", nargs="?", default="fsdp", help="fsdp (default)")
    q.set_defaults(func=lambda a: print(accelerate_config(a.name)) or 0)
