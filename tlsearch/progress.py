"""What the driver shows while a study runs: a live bar on a terminal, one log line per trial otherwise."""

from __future__ import annotations

import math
import sys
import time
from collections import Counter

from optuna.trial import TrialState


class Progress:
    """Counts of this run's trials, the best value so far, elapsed time and an ETA.

    `mode` is "bar" (a live tqdm bar), "log" (a line per finished trial), "off", or "auto":
    a bar when stderr is a terminal, lines otherwise.
    """

    def __init__(self, total: int | None, done_before: int, mode: str = "auto", stream=None) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "log"
        self.mode = mode
        self.total = total
        self.done_before = done_before
        self.counts: Counter[str] = Counter()
        self.running = 0
        self.best: float | None = None
        self.started = time.monotonic()
        self._bar = None
        if mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done_before, unit="trial", file=self.stream,
                             dynamic_ncols=True, smoothing=0.1)

    def note(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        elif self.mode != "off":
            print(message, file=self.stream, flush=True)

    def update(self, running: int, best: float | None) -> None:
        self.running, self.best = running, best
        if self._bar is not None:
            self._bar.set_postfix_str(self._status(), refresh=True)

    def finished(self, number: int, state: TrialState, value: float | None, detail: str = "") -> None:
        self.counts[state.name] += 1
        if state in (TrialState.COMPLETE, TrialState.PRUNED) and self._bar is not None:
            self._bar.update(1)
        if self.mode == "log":
            shown = "" if value is None else f" {value:.6g}"
            suffix = f" ({detail})" if detail else ""
            self.note(f"trial {number} {state.name}{shown}{suffix} | {self._status()}")
        elif self._bar is not None and state == TrialState.FAIL and detail:
            self.note(f"trial {number} FAIL: {detail}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._status())
            self._bar.close()
            self._bar = None

    def _status(self) -> str:
        done = self.done_before + self.counts["COMPLETE"] + self.counts["PRUNED"]
        parts = [f"done {done}" + (f"/{self.total}" if self.total else ""),
                 f"complete {self.counts['COMPLETE']}", f"pruned {self.counts['PRUNED']}",
                 f"failed {self.counts['FAIL']}", f"running {self.running}"]
        if self.best is not None and math.isfinite(self.best):
            parts.append(f"best {self.best:.6g}")
        elapsed = time.monotonic() - self.started
        parts.append(f"elapsed {_duration(elapsed)}")
        finished_here = done - self.done_before
        if self.total and finished_here:
            parts.append(f"eta {_duration(elapsed / finished_here * max(self.total - done, 0))}")
        return ", ".join(parts)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
