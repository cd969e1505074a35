"""What a worker process runs (python -m baton._worker): it serves its proc and never returns."""

import os
import sys

from baton import _baton

if __name__ == "__main__":
    if os.environ.get("BATON_MONARCH") == "1":  # started by `python -m baton.monarch`
        from baton import monarch

        monarch.install()
    # What this worker's own procs run (an actor here may spawn some): the same as it.
    _baton.serve_worker([sys.executable or "python3", "-m", "baton._worker"])
