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

Every folder exported is absolute (a relative one would mean another folder in every working
directory a worker or a build runs from). A relative ``XDG_CACHE_HOME`` is ignored, as the XDG
Base Directory specification says ("If an implementation encounters a relative path in any of
these variables it should consider the path invalid and ignore it"); a relative
``GEMM_BENCH_COMPILE_CACHE`` or ``TORCHINDUCTOR_CACHE_DIR`` is made absolute against the current
directory, once, here. Where no home directory can be found (no ``HOME``, no passwd entry: a
container run with an arbitrary user id), :func:`default_dir` raises :class:`CompileCacheError`
saying which variable to set, and :func:`use_persistent_compile_cache` keeps Inductor's default
folder and says so in one line on stderr: compilation is only slower, nothing is lost.

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
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

#: The variable a maintainer sets to choose the folder.
ENV = "GEMM_BENCH_COMPILE_CACHE"
#: Inductor's own variable (Triton's kernels go under it too, unless ``TRITON_CACHE_DIR`` is set).
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"


class CompileCacheError(RuntimeError):
    """No folder can be chosen (no home directory); the message names the variable to set."""


def _home(env: MutableMapping[str, str]) -> Path:
    """The user's home directory: ``HOME``, else the passwd entry; :class:`CompileCacheError` without one."""
    if env.get("HOME"):
        return Path(env["HOME"])
    try:
        return Path.home()  # the passwd entry when HOME is unset
    except (RuntimeError, KeyError, OSError):
        getuid = getattr(os, "getuid", None)
        who = f"user id {getuid()}" if callable(getuid) else "this user"
        raise CompileCacheError(f"no home directory for the torch.compile cache (HOME is not set and {who} has no "
                                f"passwd entry); set {ENV} (or XDG_CACHE_HOME) to an absolute folder") from None


def _absolute(text: str, env: MutableMapping[str, str]) -> Path:
    """``text`` with ``~`` expanded (against :func:`_home`) and made absolute."""
    if text == "~" or text.startswith("~/"):
        text = str(_home(env)) + text[1:]
    return Path(os.path.abspath(text))


def default_dir(environ: MutableMapping[str, str] | None = None) -> Path:
    """The folder this project chooses when nobody chose one (see the module docstring); absolute."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return _absolute(env[ENV], env)
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else _home(env) / ".cache"  # relative: invalid, per the spec
    return Path(os.path.abspath(base / "gemm-bench" / "torch-compile"))


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
        env[INDUCTOR_ENV] = os.path.abspath(chosen)  # the workers and builds may run elsewhere
        return env[INDUCTOR_ENV]
    try:
        folder = default_dir(env)
    except CompileCacheError as exc:
        print(f"gemm-bench: {exc}; torch.compile keeps Inductor's default folder {inductor_default()}",
              file=sys.stderr)
        return chosen or ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return chosen or ""
    env[INDUCTOR_ENV] = str(folder)
    return str(folder)
