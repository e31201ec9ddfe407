"""``gemm-bench-cli``: the CLI reference, rendered from the argparse parser itself.

Each sub-command's ``--help`` text becomes a literal block, so the reference cannot drift from the
flags the program really accepts.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class GemmBenchCli(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from gemm_bench.cli.commands import build_parser

        parser = build_parser()
        parser.prog = "gemm-bench"
        out: list[nodes.Node] = [nodes.literal_block(text=_help(parser), language="text")]
        subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        for name, sub in subparsers.choices.items():
            section = nodes.section(ids=[f"gemm-bench-{name}"])
            section += nodes.title(text=f"gemm-bench {name}")
            section += nodes.literal_block(text=_help(sub), language="text")
            out.append(section)
        return out


def _help(parser: Any) -> str:
    import os

    os.environ.setdefault("COLUMNS", "100")
    return parser.format_help()


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("gemm-bench-cli", GemmBenchCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
