"""What a worker process runs (python -m baton._worker): it serves its proc and never returns."""

import sys

import _baton

if __name__ == "__main__":
    # What this worker's own procs run (an actor here may spawn some): the same as it.
    _baton.serve_worker([sys.executable or "python3", "-m", "baton._worker"])
