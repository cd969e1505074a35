"""pip install . builds the `baton._baton` extension with CMake (the same build as `make python`)
and installs it with the `baton` package, which carries the host agent (baton-host) its jobs
start and the `baton` command (bin/baton, run by the `baton` script pip installs).
Offline, from Debian's packages:

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation --no-index .

BATON_BUILD_DIR names a build directory to reuse (as `make` leaves it), instead of a new one.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("BATON_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake"
        )
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
            subprocess.check_call(
                ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DBATON_TESTS=OFF",
                 "-DBATON_BENCH=OFF", "-DBATON_EXAMPLES=OFF", "-DBATON_HEADER_CHECK=OFF",
                 f"-DPython_EXECUTABLE={sys.executable}"] + launcher
            )
        subprocess.check_call(
            ["cmake", "--build", build, "--target", "_baton", "baton-host", "baton-cli"]
        )
        built = glob.glob(os.path.join(build, "python", "baton", "_baton*.so"))
        if not built:
            raise RuntimeError(f"the build in {build} made no _baton module")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)
        # The host agent that SshJob and SlurmJob start on their hosts, inside the package.
        agent = os.path.join(os.path.dirname(target), "bin", "baton-host")
        os.makedirs(os.path.dirname(agent), exist_ok=True)
        shutil.copy2(os.path.join(build, "bin", "baton-host"), agent)
        # The `baton` command, which the script pip installs runs (baton._cli).
        shutil.copy2(os.path.join(build, "bin", "baton"),
                     os.path.join(os.path.dirname(agent), "baton"))


setup(
    packages=["baton", "baton.monarch"],
    package_dir={"": "python"},
    ext_modules=[Extension("baton._baton", sources=[])],
    package_data={"baton": ["py.typed", "_baton.pyi"]},
    cmdclass={"build_ext": CMakeBuild},
)
