"""What a worker process runs (python -m baton._worker): it serves its proc and never returns."""

import sys

import _baton

if __name__ == "__main__":
    _baton.serve_worker(sys.argv)
