"""Merging result files that several GPU runners produced into one cache.

The refresh workflow runs one job per GPU family; each uploads the cache files it wrote. The
final job calls :func:`merge` with the downloaded directories. Every incoming file is validated
exactly as a cache read would (:func:`gemm_bench.results.cache.read_document`: schema, question hash,
file name), so a runner cannot slip a malformed or misnamed file into the pull request.

When the cache already holds a file for the same question and device, the rule is:

* identical content: nothing to do;
* another software stack (TE, PyTorch, CUDA, driver or method version): the newer run wins
  whole, because one provenance block must stay true of every cell in a file;
* the same stack: the runs are folded by :func:`gemm_bench.results.schema.merge_documents` (the one rule
  the cache uses for every store), with the newer run passed as the new one, so where both
  measured, the newer run's measurement is kept.

Study files (``kind: study``: loss parity, dynamic range; :mod:`gemm_bench.results.studies`) come
in the same artifacts and are told apart by their content, validated as a study read would
(:func:`gemm_bench.results.studies.read_study`) and placed in the cache's ``studies/`` folder by a
rule of their own (:func:`decide_study`): a study is one run with no cells to fold, so the newer
run replaces the older one whole, and an older or identical one changes nothing.

Each decision is returned as a :class:`MergeAction` saying which run was kept and why, and
printed by ``gemm-bench merge``. What it says was kept and dropped is counted from the document
actually written (:func:`account`), never from what the rule intends, so the message cannot
disagree with the file: one mode is one run, so a re-measured mode drops every cached cell of
that mode, re-measured precision or not, and the message names them.

"Newer" needs dates that mean something: a date that does not parse, or one later than now plus
:data:`MAX_CLOCK_SKEW`, would win or lose every merge, so the file is rejected, by name (a cached
file too: it is never silently outranked or obeyed). Writes are atomic under the file's lock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results import studies
from gemm_bench.results.cache import Cache, CacheError, dumps, read_document, write_atomic
from gemm_bench.results.schema import WHOLE_BLOCKS, merge_documents, stamp_run_ids, validate
from gemm_bench.results.stack import document_stack
from gemm_bench.results.untrusted_text import field, markdown

#: How far ahead of this machine's clock a runner's clock may be: a date later than now plus this
#: is refused (a file dated 2099 would otherwise win every merge).
MAX_CLOCK_SKEW = dt.timedelta(hours=1)


class MergeError(ValueError):
    """A merge that cannot start (a source directory that does not exist)."""


class DateError(ValueError):
    """A result whose date cannot order it against another run; the message names the file."""


@dataclasses.dataclass(frozen=True)
class MergeAction:
    source: Path
    target: Path | None
    #: "added", "replaced", "merged", "kept-existing", "identical" or "rejected".
    action: str
    reason: str

    def describe(self) -> str:
        where = f" -> {self.target}" if self.target else ""
        return f"{self.action}: {self.source}{where} ({self.reason})"


def _when(doc: dict[str, Any]) -> dt.datetime | None:
    text = doc["provenance"]["date"]
    try:
        when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except (ValueError, TypeError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def check_date(doc: dict[str, Any], path: str | Path, now: dt.datetime | None = None) -> dt.datetime:
    """The run's date, or :class:`DateError` naming ``path`` when it does not parse or lies ahead
    of ``now`` (default: this machine's clock) by more than :data:`MAX_CLOCK_SKEW`."""
    text = doc["provenance"]["date"]
    when = _when(doc)
    if when is None:
        raise DateError(f"{path}: its date {field(str(text))!r} is not an ISO 8601 date and time, so it "
                        "cannot be ordered against another run")
    now = now if now is not None else dt.datetime.now(dt.timezone.utc)
    now = now if now.tzinfo else now.replace(tzinfo=dt.timezone.utc)
    if when > now + MAX_CLOCK_SKEW:
        raise DateError(f"{path}: its date {field(text)} is in the future (this machine's clock reads "
                        f"{now.replace(microsecond=0).isoformat()}; at most {MAX_CLOCK_SKEW} of clock skew "
                        "is allowed); a run cannot be newer than now, so it would win every merge")
    return when


#: The blocks of per-run entries of a document (``cells``, ``peers`` and
#: :data:`~gemm_bench.results.schema.RUN_BLOCKS`), and what one entry is called in a message.
_BLOCKS = {"cells": "cells", "peers": "peer rows", "layer": "layer-step cells", "accuracy": "SQNR cells"}


#: The fields that say which measurement an entry is (not what was measured): two entries with
#: the same identity are two runs' measurements of one cell.
_IDENTITY = ("backend", "kind", "mode", "precision", "op", "pass", "m", "k", "n", "groups", "distribution")


def _content(entry: dict[str, Any]) -> str:
    """One entry's content, whatever run id the merge stamped on it."""
    return json.dumps({k: v for k, v in entry.items() if k != "run_id"}, sort_keys=True, default=str)


def _identity(entry: dict[str, Any]) -> str:
    return json.dumps({k: entry[k] for k in _IDENTITY if k in entry}, sort_keys=True, default=str)


def _where(entry: dict[str, Any]) -> str:
    """Mode and precision of an entry, as a message lists them (``autocast FP8 Current``)."""
    precision = str(entry.get("precision", ""))
    shown = PRECISIONS[precision].display if precision in PRECISIONS else field(precision)
    mode = entry.get("mode", entry.get("backend", ""))
    return f"{field(str(mode))} {shown}".strip()


def _listed(counts: Counter[str]) -> str:
    return ", ".join(f"{where}: {n}" for where, n in sorted(counts.items()))


def account(existing: dict[str, Any], incoming: dict[str, Any], written: dict[str, Any] | None) -> str:
    """What of each run the resulting file holds, counted from it: the facts of a merge message.

    ``written`` None means the cached file stays as it is. Per block (GEMM cells, peer rows,
    layer-step and SQNR cells) and per run, an entry is *kept* when the file holds its content
    (whatever run id the merge stamped on it), *superseded* when the file holds the other run's
    measurement of the same cell instead, and *dropped* when the file holds no measurement of
    that cell at all; superseded and dropped ones are counted by mode and precision.
    """
    result = existing if written is None else written
    parts = []
    for side, doc in (("incoming", incoming), ("cached", existing)):
        for block, noun in _BLOCKS.items():
            contents = {_content(e) for e in result.get(block, [])}
            identities = {_identity(e) for e in result.get(block, [])}
            kept = 0
            superseded: Counter[str] = Counter()
            dropped: Counter[str] = Counter()
            for entry in doc.get(block, []):
                if _content(entry) in contents:
                    kept += 1
                elif _identity(entry) in identities:
                    superseded[_where(entry)] += 1
                else:
                    dropped[_where(entry)] += 1
            if kept:
                parts.append(f"kept {kept} {side} {noun}")
            if superseded:
                parts.append(f"{sum(superseded.values())} {side} {noun} superseded by the other run's measurement "
                             f"({_listed(superseded)})")
            if dropped:
                parts.append(f"dropped {sum(dropped.values())} {side} {noun} ({_listed(dropped)})")
    for block in WHOLE_BLOCKS:  # measured whole by one run: whose the file holds, said by name
        held = result.get(block)
        if held is None:
            continue
        name = _WHOLE_NOUNS[block]
        if held == incoming.get(block) and held == existing.get(block):
            parts.append(f"the {name} (the same in both)")
        elif held == incoming.get(block):
            parts.append(f"the incoming {name}" + (", replacing the cached one" if block in existing else ""))
        elif held == existing.get(block):
            parts.append(f"kept the cached {name}" + (" over the incoming one" if block in incoming
                                                       else " (the incoming run did not measure it)"))
    return "; ".join(parts) or "neither run holds any cell"


_WHOLE_NOUNS = {"model_step": "model step", "plan": "precision plan", "energy": "energy per step"}


def _stack_text(doc: dict[str, Any]) -> str:
    stack = document_stack(doc)
    return field(f"TE {stack['transformer_engine']}, torch {stack['torch']}, CUDA {stack['cuda']}, "
                 f"driver {stack['driver']}, method {stack['method']}")


def incoming_files(dirs: Sequence[Path]) -> list[Path]:
    """Result files under each directory (recursively: one sub-folder per downloaded artifact)."""
    files: list[Path] = []
    for directory in dirs:
        if not directory.is_dir():
            raise MergeError(f"DIR: {directory} is not a directory")
        files += sorted(p for p in directory.rglob("*.json") if p.is_file())
    return files


def decide(existing: dict[str, Any], incoming: dict[str, Any], *, now: dt.datetime | None = None,
           existing_path: str | Path = "the cached file", incoming_path: str | Path = "the incoming file",
           ) -> tuple[str, dict[str, Any] | None, str]:
    """(action, document to write or None, reason) for one conflict; pure, for tests and dry runs.

    Raises :class:`DateError` (naming the path given for it) when either run's date does not
    parse or lies in the future. The reason ends with :func:`account` of the outcome.
    """
    if existing == incoming:
        return "identical", None, "same content as the cached file"
    when_old = check_date(existing, Path(existing_path), now)
    when_new = check_date(incoming, Path(incoming_path), now)
    old_date, new_date = field(existing["provenance"]["date"]), field(incoming["provenance"]["date"])
    written: dict[str, Any] | None
    if document_stack(existing) != document_stack(incoming):
        if when_new > when_old:
            action, written = "replaced", incoming
            why = (f"another software stack and newer: the incoming run ({_stack_text(incoming)}, {new_date}) "
                   f"replaces the cached one ({_stack_text(existing)}, {old_date}) whole")
        else:
            action, written = "kept-existing", None
            why = (f"another software stack but not newer: the cached run ({_stack_text(existing)}, {old_date}) "
                   f"stays whole over the incoming one ({_stack_text(incoming)}, {new_date})")
    elif when_new > when_old:
        action, written = "merged", validate(merge_documents(existing, incoming))
        why = (f"same stack; the incoming run ({new_date}) is newer: every mode it measured replaces the cached "
               "cells of that mode (one mode is one run); cached modes it did not measure stay")
    else:
        merged = merge_documents(incoming, existing)
        if merged == existing:
            action, written = "kept-existing", None
            why = f"same stack; the cached run ({old_date}) is not older and holds every mode of the incoming one"
        else:
            action, written = "merged", validate(merged)
            why = (f"same stack; the cached run ({old_date}) is not older: its cells win, whole modes "
                   "(one mode is one run); the incoming run adds the modes the cached one lacks")
    return action, written, f"{why}: {account(existing, incoming, written)}"


def decide_study(existing: dict[str, Any], incoming: dict[str, Any], *, now: dt.datetime | None = None,
                 existing_path: str | Path = "the cached file", incoming_path: str | Path = "the incoming file",
                 ) -> tuple[str, dict[str, Any] | None, str]:
    """(action, document to write or None, reason) for two runs of one study on one device.

    A study is one run (its losses, its SQNRs and its provenance belong together), so nothing is
    folded: the newer run replaces the cached one whole, an older one leaves it. Raises
    :class:`DateError` as :func:`decide` does.
    """
    if existing == incoming:
        return "identical", None, "same content as the cached study"
    when_old = check_date(existing, Path(existing_path), now)
    when_new = check_date(incoming, Path(incoming_path), now)
    old, new = (f"{field(str(d['provenance']['date']))}, study method v{field(str(d['method_version']))}"
                for d in (existing, incoming))
    if when_new > when_old:
        return "replaced", incoming, (f"a study is one run: the newer incoming run ({new}) replaces the cached one "
                                      f"({old})")
    return "kept-existing", None, (f"a study is one run: the cached run ({old}) is not older than the incoming one "
                                   f"({new})")


def _merge_study(source: Path, cache_dir: Path, now: dt.datetime | None) -> MergeAction:
    try:
        incoming = studies.read_study(source)
        check_date(incoming, source, now)
    except CacheError as exc:
        return MergeAction(source, None, "rejected", exc.problem)
    except DateError as exc:
        return MergeAction(source, None, "rejected", str(exc))
    target = studies.study_dir(cache_dir) / studies.file_name(incoming["study"], incoming["device"]["name"])
    if target.parent.is_symlink():
        return MergeAction(source, None, "rejected", f"not merged: {target.parent} is a symbolic link")
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(target.name + ".lock"))):
        existing: dict[str, Any] | None = None
        corrupt = ""
        if target.exists() or target.is_symlink():
            try:
                existing = studies.read_study(target)
            except CacheError as exc:
                corrupt = exc.problem
        if existing is None:
            write_atomic(target, dumps(incoming))
            if corrupt:
                return MergeAction(source, target, "replaced", f"replaced an unusable cached study ({field(corrupt)})")
            return MergeAction(source, target, "added",
                               f"new {field(incoming['study'])} study for {field(incoming['device']['name'])}")
        try:
            action, document, reason = decide_study(existing, incoming, now=now, existing_path=target,
                                                    incoming_path=source)
        except DateError as exc:
            return MergeAction(source, target, "rejected", f"not merged: {exc}")
        if document is not None:
            write_atomic(target, dumps(document))
        return MergeAction(source, target, action, reason)


def merge(dirs: Iterable[str | Path], cache_dir: str | Path, *, now: dt.datetime | None = None) -> list[MergeAction]:
    """Validate every result and study file under ``dirs`` and place it in ``cache_dir``; say what was done.

    Files are taken in the order of ``dirs`` and, within one, by path, so a run is reproducible.
    A rejected file (invalid, or dated in the future, or meeting a cached file dated in the
    future) is reported and skipped; it never stops the others. A study file goes to the cache's
    ``studies/`` folder (:func:`decide_study`). ``now`` is the clock dates are checked against
    (default: this machine's).
    """
    cache = Cache(cache_dir)
    actions: list[MergeAction] = []
    for source in incoming_files([Path(d) for d in dirs]):
        if studies.holds_study(source):
            actions.append(_merge_study(source, Path(cache_dir), now))
            continue
        try:
            incoming = read_document(source, raw=True)
            check_date(incoming, source, now)
        except CacheError as exc:
            actions.append(MergeAction(source, None, "rejected", exc.problem))
            continue
        except DateError as exc:
            actions.append(MergeAction(source, None, "rejected", str(exc)))
            continue
        with cache.locked(incoming["question_hash"], incoming["device"]["name"]) as target:
            existing: dict[str, Any] | None = None
            corrupt = ""
            if target.exists():
                try:
                    existing = read_document(target, raw=True)
                except CacheError as exc:
                    corrupt = exc.problem
            if existing is None:
                write_atomic(target, dumps(incoming))
                reason = (f"replaced an unusable cached file ({field(corrupt)})" if corrupt
                          else f"new result for {field(incoming['device']['name'])}")
                actions.append(MergeAction(source, target, "replaced" if corrupt else "added", reason))
                continue
            try:
                action, document, reason = decide(existing, incoming, now=now, existing_path=target,
                                                  incoming_path=source)
            except DateError as exc:
                actions.append(MergeAction(source, target, "rejected", f"not merged: {exc}"))
                continue
            if document is not None:
                write_atomic(target, dumps(document))
            actions.append(MergeAction(source, target, action, reason))
    return actions


# ------------------------------------------------------------------------------- peers alone
class PeersMergeError(ValueError):
    """A peers-only run that cannot join the cached result (another question, device or method)."""


#: The provenance of a peers-only run that the merged file keeps (``provenance.peers_run``): the
#: peer rows' run, beside the top-level provenance that stays true of every other entry.
_PEERS_RUN_FIELDS = ("torch", "transformer_engine", "cuda", "cublas", "driver", "commit", "date", "measure_s")


def merge_peers(cached: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The cached result with a peers-only run's peer rows (:meth:`Runner.measure` ``peers_only``).

    Issue 34: a page that starts showing peers for a question measured without them measures the
    peers alone; nothing else of the file is re-measured or touched. The run's rows replace the
    cached rows of their kinds (Linear peers, GEMM peers) and carry their own ``run_id``: no speedup
    divides a peer by a Transformer Engine cell (peers are their own rows), so no number mixes the
    two runs. The run's timed groups join the file's (their telemetry and cross-check describe the
    rows); its provenance is kept as ``provenance.peers_run``, and ``provenance.method.peers`` says
    how the rows were measured. Both documents must be valid; :class:`PeersMergeError` when they
    are not of one question, device and method version.
    """
    for key, what in (("question_hash", "question"), ("method_version", "method version")):
        if cached.get(key) != run.get(key):
            raise PeersMergeError(f"the peers-only run is of another {what} ({run.get(key)!r}) than the cached "
                                  f"result ({cached.get(key)!r})")
    if cached["device"]["name"] != run["device"]["name"]:
        raise PeersMergeError(f"the peers-only run is of {run['device']['name']!r}, the cached result of "
                              f"{cached['device']['name']!r}")
    merged = stamp_run_ids(cached)
    rows = stamp_run_ids(run)["peers"]
    kinds = {row.get("kind", "gemm") for row in rows}
    merged["peers"] = [p for p in merged["peers"] if p.get("kind", "gemm") not in kinds] + rows
    kept = {str(p["run_id"]) for p in merged["peers"]} | {
        str(c["run_id"]) for block in ("cells", "layer", "accuracy") for c in merged.get(block, [])}
    groups = [g for g in merged.get("groups", []) if g.get("run_id") in kept]
    groups += [{**g, "run_id": run["run_id"]} for g in run.get("groups", [])]
    if groups or "groups" in merged:
        merged["groups"] = groups
    provenance = merged["provenance"]  # stamp_run_ids made a copy
    provenance["method"]["peers"] = run["provenance"]["method"].get("peers", "")
    provenance["peers_run"] = {"run_id": run["run_id"], **{k: run["provenance"][k] for k in _PEERS_RUN_FIELDS
                                                          if k in run["provenance"]}}
    return merged


def store_peers(cache: Cache, run: dict[str, Any]) -> Path:
    """Merge a peers-only run into its cached result (:func:`merge_peers`), atomically, under the
    file's lock. With no valid cached result to join (removed, or unreadable, meanwhile) the run is
    stored alone: a valid result holding the peers, whose missing cells the next plan measures."""
    validate(run)
    with cache.locked(run["question_hash"], run["device"]["name"]) as path:
        try:
            cached: dict[str, Any] | None = read_document(path, raw=True)
        except CacheError:
            cached = None
        doc = run if cached is None else validate(merge_peers(cached, run))
        write_atomic(path, dumps(doc))
    return path


def summary_markdown(actions: Sequence[MergeAction]) -> str:
    """What a pull request body says about the merge: each file that was not merged, and why.

    Empty when every file was used. Strings from the files are escaped (:func:`markdown`): the
    body is rendered by GitHub, and a runner's file must not add markup or mentions to it.
    """
    rejected = [a for a in actions if a.action == "rejected"]
    if not rejected:
        return ""
    lines = [f"> **{len(rejected)} of {len(actions)} result file(s) from the runners could not be merged**; "
             "every other file is in this pull request. Re-measure or fix these:", ">"]
    lines += [f"> - {markdown(str(a.source))}: {markdown(a.reason)}" for a in rejected]
    return "\n".join(lines) + "\n"
