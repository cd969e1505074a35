"""The `baton` script pip installs: runs the `baton` command (C++) the package carries, which
looks inside a running job (baton ls, top, stack, logs, debug, ...)."""

import os
import sys


def program() -> str:
    """Where the package's `baton` command is."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "baton")


def main() -> None:
    exe = program()
    if not os.access(exe, os.X_OK):
        sys.exit(
            f"baton: {exe} is missing: this baton package was installed without its command "
            "(pip install . builds it; in a source tree, it is build/bin/baton)"
        )
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
