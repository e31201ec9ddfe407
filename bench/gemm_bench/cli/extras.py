"""Which extras of the distribution each ``gemm-bench`` command needs: one table for the help, the
errors and the README (``tests/test_fleet_round3.py`` checks the README against it).

The plain install (``pip install -e .``) has no torch, Transformer Engine or Sphinx. ``refresh``
reads the pages with Sphinx (the ``docs`` extra, enough for ``--dry-run``) and measures with the
GPU stack (the ``gpu`` extra; an NVIDIA PyTorch container has it).
"""

from __future__ import annotations

#: The extras of ``pip install -e '.[...]'`` each command needs beyond the plain install.
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "shapes": (), "presets": (), "report": (), "layout-step": (), "compare": (), "merge": (), "readme-figure": (),
    "run": ("gpu",), "study": ("gpu",), "refresh": ("docs", "gpu"),
}


def needs(command: str) -> str:
    """`` (needs the 'gpu' extra)``: what the help line of ``command`` says it needs."""
    extras = COMMAND_EXTRAS[command]
    if not extras:
        return ""
    return " (needs the " + " and ".join(f"'{e}'" for e in extras) + (" extras)" if len(extras) > 1 else " extra)")


def _names(commands: list[str]) -> str:
    quoted = [f"`{c}`" for c in commands]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def readme_sentence() -> str:
    """What the README says each command needs, from :data:`COMMAND_EXTRAS` (a test holds the
    README to it, so the two cannot drift apart again)."""
    plain = [c for c, extras in COMMAND_EXTRAS.items() if not extras]
    gpu_only = [c for c, extras in COMMAND_EXTRAS.items() if extras == ("gpu",)]
    both = [c for c, extras in COMMAND_EXTRAS.items() if extras == ("docs", "gpu")]
    assert len(plain) + len(gpu_only) + len(both) == len(COMMAND_EXTRAS), "a new combination of extras: say it"
    return (f"{_names(plain)} work from the plain install; {_names(gpu_only)} need the `gpu` extra; "
            f"{_names(both)} reads the pages with Sphinx, so it needs the `docs` extra (enough for "
            "`--dry-run`) and, to measure, the `gpu` extra too (`pip install -e '.[docs,gpu]'`).")
