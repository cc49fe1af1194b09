"""Write latency on the journal study store with many writer processes: Optuna's lock against tlsearch's.

    python bench/journal_lock.py [--processes 16] [--writes 60] [--repeats 2]

Each process appends one user attribute every 20 ms to a trial of one shared journal file, all starting at
the same moment (what a wave of k-fold trials finishing a fold does). Optuna's JournalFileSymlinkLock polls
with a doubling sleep; tlsearch's QueuedJournalLock queues writers in the kernel (flock) before taking the
same symlink lock. Prints the median, 95th percentile and worst write latency of each; medians over processes
and repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import optuna

WRITER = """
import sys, time, optuna
from optuna.storages.journal import JournalFileBackend
from tlsearch.storage._journal import open_journal
path, kind, start, writes = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
storage = open_journal(path) if kind == "tlsearch" else optuna.storages.JournalStorage(JournalFileBackend(path))
trial_id = storage.create_new_trial(storage.get_study_id_from_name("shared"))
while time.time() < start:
    time.sleep(0.001)
latencies = []
for i in range(writes):
    began = time.perf_counter()
    storage.set_trial_user_attr(trial_id, f"split{i}_test_score", i / writes)
    latencies.append(time.perf_counter() - began)
    time.sleep(0.02)
print(" ".join(f"{seconds * 1000:.3f}" for seconds in latencies))
"""


def run(kind: str, processes: int, writes: int) -> list[float]:
    """Every write latency (ms) of `processes` concurrent writers using `kind`'s lock."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "studies.journal")
        optuna.create_study(
            study_name="shared",
            storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path)),
        )
        start = time.time() + 2 + processes * 0.25  # after every process has imported Optuna
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, path, kind, str(start), str(writes)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(processes)
        ]
        outputs = [writer.communicate()[0] for writer in writers]
        if any(writer.returncode for writer in writers):
            raise RuntimeError(f"a {kind} writer failed")
    return [float(value) for output in outputs for value in output.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--writes", type=int, default=60, help="writes per process")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    figures: dict[str, list[tuple[float, float, float]]] = {"optuna": [], "tlsearch": []}
    for _ in range(args.repeats):
        for kind in figures:
            latencies = sorted(run(kind, args.processes, args.writes))
            figures[kind].append((statistics.median(latencies), latencies[int(0.95 * len(latencies))], latencies[-1]))
    print(f"write latency with {args.processes} writer processes, ms (medians of {args.repeats} runs)")
    print(f"{'lock':>28} {'median':>7} {'p95':>7} {'worst':>7}")
    labels = {"optuna": "Optuna JournalFileSymlinkLock", "tlsearch": "tlsearch QueuedJournalLock"}
    for kind, runs in figures.items():
        median, p95, worst = (statistics.median(column) for column in zip(*runs))
        print(f"{labels[kind]:>28} {median:>7.2f} {p95:>7.2f} {worst:>7.1f}")


if __name__ == "__main__":
    main()
