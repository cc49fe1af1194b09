"""What the driver shows while a study runs: a live bar on a terminal, one log line per trial otherwise."""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Iterable

from optuna.trial import TrialState

from tlsearch._text import printable

# How many of the latest trial durations the ETA's median is taken over.
ETA_WINDOW = 20


class Progress:
    """Counts of the study's trials by state (complete, pruned, failed: the whole study, not just this run),
    the running ones, the best value so far, elapsed time and an ETA.

    Elapsed time is this run's, and says "since resume" when the study had finished trials before it. The ETA
    is the median duration of the latest ETA_WINDOW trials (counting the study's stored ones, so that a resumed
    run has one from its first line) times the trials left per slot (`parallelism`): one slow or pruned trial
    does not swing it.
    `mode` is "bar" (a live tqdm line that fits 80 columns), "log" (a line per finished trial), "off", or
    "auto": a bar when stderr is a terminal, lines otherwise.
    """

    def __init__(
        self,
        total: int | None,
        counts: Counter[str],
        mode: str = "auto",
        stream=None,
        parallelism: int = 1,
        durations: Iterable[float] = (),
    ) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "log"
        self.mode = mode
        self.total = total
        self.counts: Counter[str] = Counter({state: counts[state] for state in ("COMPLETE", "PRUNED", "FAIL")})
        self.done_before = self._done()
        self.running = 0
        self.best: float | None = None  # the study's best value, when `shows_best`
        self.started = time.monotonic()
        self.parallelism = max(1, parallelism)
        self._durations: deque[float] = deque(durations, maxlen=ETA_WINDOW)
        self._bar = None
        if mode == "bar":
            from tqdm import tqdm

            # No bar graphic: counts, best value and [elapsed<eta] fit one 80-column line.
            # (A terminal that reports no size, like `script`'s, counts as 80 x 24.)
            size = shutil.get_terminal_size((80, 24))
            self._bar = tqdm(
                total=total,
                initial=self.done_before,
                unit="trial",
                file=self.stream,
                smoothing=0.1,
                ncols=min(80, size.columns),
                nrows=size.lines,
                bar_format="{n_fmt}/{total_fmt} done{postfix}",
            )

    @property
    def shows_best(self) -> bool:
        """Whether anything shows `best` (reading it from the study costs a store query)."""
        return self.mode != "off"

    def note(self, message: str) -> None:
        """Show one line (its control characters escaped: it may hold what a trial or the store said)."""
        message = printable(message, keep_newlines=True)
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        elif self.mode != "off":
            print(message, file=self.stream, flush=True)

    def update(self, running: int) -> None:
        self.running = running
        if self._bar is not None:
            self._bar.set_postfix_str(self._bar_postfix(), refresh=True)

    def finished(
        self, number: int, state: TrialState, value: float | None, detail: str = "", seconds: float | None = None
    ) -> None:
        """Count a trial that ended in `state`, which took `seconds` (None: unknown, left out of the ETA)."""
        self.counts[state.name] += 1
        if seconds is not None and math.isfinite(seconds):
            self._durations.append(seconds)
        if state in (TrialState.COMPLETE, TrialState.PRUNED) and self._bar is not None:
            self._bar.set_postfix_str(self._bar_postfix(), refresh=False)
            self._bar.update(1)
        if self.mode == "log":
            shown = f" {value:.6g}" if _is_number(value) else ""
            suffix = f" ({detail})" if detail else ""
            self.note(f"trial {number} {state.name}{shown}{suffix} | {self._status()}")
        elif self._bar is not None and state == TrialState.FAIL and detail:
            self.note(f"trial {number} FAIL: {detail}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._bar_postfix())
            self._bar.close()
            self._bar = None

    def _done(self) -> int:
        return self.counts["COMPLETE"] + self.counts["PRUNED"]

    def _counts(self) -> str:
        parts = [f"{self.counts['PRUNED']} pruned", f"{self.counts['FAIL']} failed", f"{self.running} running"]
        if _is_number(self.best) and math.isfinite(self.best):
            parts.append(f"best {self.best:.6g}")
        return ", ".join(parts)

    def _status(self) -> str:
        done = self._done()
        parts = [f"done {done}" + (f"/{self.total}" if self.total else ""), self._counts()]
        resumed = " since resume" if self.done_before else ""
        parts.append(f"elapsed {_duration(time.monotonic() - self.started)}{resumed}")
        eta = self._eta()
        if eta is not None:
            parts.append(f"eta {_duration(eta)}")
        return ", ".join(parts)

    def _bar_postfix(self) -> str:
        eta = self._eta()
        resumed = "resumed " if self.done_before else ""
        times = f"{resumed}{_duration(time.monotonic() - self.started)}<{'?' if eta is None else _duration(eta)}"
        return f"{self._counts()} [{times}]"

    def _eta(self) -> float | None:
        """Seconds until `total` trials are done, or None when there is no total or no duration to go by."""
        if not self.total or not self._durations:
            return None
        left = max(self.total - self._done(), 0)
        return statistics.median(self._durations) * max(left / self.parallelism, 1) if left else 0.0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
