"""Issue 34's trade-off, measured: every ``TimerSettings()`` of this process (and of the refresh's
workers, which import this too when this folder is on PYTHONPATH) gets fewer timed rounds and a
shorter time cap per group, so one whole-site refresh shows what the rounds cost in wall time.

    PYTHONPATH=tools/rounds_tradeoff:$PYTHONPATH ROUNDS=25 GROUP_S=3 python3 -m gemm_bench.cli refresh docs/ --force

Never used by the site's refresh: results measured under it record their settings in their method
(``repetitions``, ``max_group_s``) and are compared, not committed.
"""

import os

if os.environ.get("ROUNDS"):
    import gemm_bench.measure.timing as _timing

    _init = _timing.TimerSettings.__init__

    def _patched(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("repetitions", int(os.environ["ROUNDS"]))
        kwargs.setdefault("max_group_s", float(os.environ.get("GROUP_S", "10")))
        _init(self, *args, **kwargs)

    _timing.TimerSettings.__init__ = _patched  # type: ignore[method-assign]
