"""Where ``torch.compile`` keeps what it compiled: a folder that outlives the process and the boot.

torchao's peer is compiled by Inductor (``torch.compile``), and on a cold box that compilation is
most of the first questions' wall time (about 37 s of the first question's 46 s ``first call
(probe)`` phase on an H100 in session 8). Inductor caches its compiled graphs (the FX graph and AOTAutograd
caches) and their Triton kernels under ``TORCHINDUCTOR_CACHE_DIR``, by default
``/tmp/torchinductor_<user>``: on many GPU boxes ``/tmp`` is emptied at every boot or is private to
one container, so every refresh would pay the compilation again. This module points Inductor at a
folder under the user's cache directory instead, once, before anything is compiled:

* ``GEMM_BENCH_COMPILE_CACHE``, where a maintainer puts it (a volume a fleet's boxes keep); else
* ``$XDG_CACHE_HOME/gemm-bench/torch-compile``; else ``~/.cache/gemm-bench/torch-compile``.

A ``TORCHINDUCTOR_CACHE_DIR`` the caller set is left alone, except Inductor's own default: importing
``torch._dynamo`` (as Transformer Engine and torchao do) writes that default into the environment,
so a value equal to it is read as "nobody chose" and replaced. That is safe until the first
compilation (Inductor reads the variable again whenever it needs the folder), and the measuring
path (``measure_question``, a refresh worker's and a docs build's) calls this before it compiles
anything. What is cached never changes what is timed: a cache hit loads the very kernels a
compilation would build (Inductor's cache key holds the graph, the torch version, the device and
the compiler's settings). Pure Python; no torch import.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

#: The variable a maintainer sets to choose the folder.
ENV = "GEMM_BENCH_COMPILE_CACHE"
#: Inductor's own variable (Triton's kernels go under it too, unless ``TRITON_CACHE_DIR`` is set).
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"


def default_dir(environ: MutableMapping[str, str] | None = None) -> Path:
    """The folder this project chooses when nobody chose one (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "gemm-bench" / "torch-compile"


def inductor_default() -> str:
    """Inductor's own default folder, as ``torch._inductor.runtime.cache_dir_utils`` computes it
    (``<tmp>/torchinductor_<user>``), without importing torch."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.abspath(os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)))


def use_persistent_compile_cache(environ: MutableMapping[str, str] | None = None) -> str:
    """Point Inductor at :func:`default_dir` unless someone chose a folder; the folder in use.

    Called before the first ``torch.compile`` of a process (Inductor reads the variable whenever it
    needs the folder). A ``TORCHINDUCTOR_CACHE_DIR`` equal to :func:`inductor_default` counts as
    not chosen (torch writes it there on import). A folder that cannot be made is not an error:
    Inductor's default is then kept, and the compilation is only slower.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(INDUCTOR_ENV)
    if chosen and os.path.abspath(chosen) != inductor_default():
        return chosen
    folder = default_dir(env)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return chosen or ""
    env[INDUCTOR_ENV] = str(folder)
    return str(folder)
