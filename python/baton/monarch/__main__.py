"""python -m baton.monarch SCRIPT [ARGS...] | -m MODULE [ARGS...] | -c CODE [ARGS...]: runs a
program written for Monarch, as __main__, with `monarch` resolved to baton's implementation."""

import os
import runpy
import sys

from . import install

USAGE = (
    "usage: python -m baton.monarch SCRIPT [ARGS...]\n"
    "       python -m baton.monarch -m MODULE [ARGS...]   (e.g. -m pytest tests/)\n"
    "       python -m baton.monarch -c CODE [ARGS...]\n"
    "Runs a program written for Monarch on baton: `monarch` and its submodules resolve to "
    "baton.monarch, in this process and in every worker it starts."
)


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] == "-m":
        if len(args) < 2:
            print("python -m baton.monarch -m: name the module to run\n" + USAGE, file=sys.stderr)
            return 2
        install()
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    if args[0] == "-c":
        if len(args) < 2:
            print("python -m baton.monarch -c: give the code to run\n" + USAGE, file=sys.stderr)
            return 2
        install()
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
        return 0
    script = args[0]
    if not os.path.isfile(script):
        print(f"python -m baton.monarch: no such script: {script}\n" + USAGE, file=sys.stderr)
        return 2
    install()
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
