"""Builds the stoker wheel: CMake builds, setuptools packs (see pyproject.toml).

`pip install .` / `python3 -m build --wheel` run this. The CMake project is configured
in build-wheel-<python>/ beside the source's build/, for the Python that runs the
build, in Release with tests and benchmarks off and CUDA off: a CPU-only libstoker
needs no CUDA runtime in the wheel; batches arrive on the CPU and `.cuda()` as usual
(device="cuda" staging needs -DSTOKER_ENABLE_CUDA=ON and the toolkit). The wheel gets:
    stoker/*.py, py.typed, _stoker.pyi      the package
    stoker/_stoker*.so                      the extension
    stoker/bin/stoker                       the CLI, run by the `stoker` command
    stoker/share/stoker/                    what `stoker bench compare` runs
    stoker.libs/                            libstoker and every library it needs
                                            beyond glibc and libstdc++ (bundle_libs.py)

Environment:
    STOKER_CMAKE_BUILD_DIR   take this already-built CMake tree (its stoker_cli and
                             stoker_python targets) instead of building one
    STOKER_CMAKE_ARGS        extra configure arguments, e.g. "-DSTOKER_ENABLE_CUDA=ON"
    STOKER_SETUPTOOLS_BUILD_BASE  setuptools' scratch folder (default build/setuptools)
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "python" / "wheel_tools"))
import bundle_libs  # noqa: E402


def project_version():
    """CMakeLists.txt's project(stoker VERSION x.y.z): the one place the version lives."""
    text = (HERE / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*stoker\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        raise RuntimeError("CMakeLists.txt: no project(stoker VERSION ...) to take the version from")
    return m.group(1)


def cached_version(build_dir):
    """The version a CMake build tree was configured with (CMakeCache.txt)."""
    cache = (build_dir / "CMakeCache.txt").read_text()
    m = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", cache, re.M)
    return m.group(1) if m else None


class CMakeBuild(build_ext):
    """Builds stoker._stoker with CMake and lays out the package's binary parts."""

    def build_extension(self, ext):
        build_dir = self._cmake_build()
        package = Path(self.get_ext_fullpath(ext.name)).parent
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "stoker" / f"_stoker{suffix}"
        if not built.exists():
            raise RuntimeError(f"{build_dir}: no {built.name}, the extension for {sys.executable}; "
                               "the tree was built for another Python, or without the stoker_python target")
        package.mkdir(parents=True, exist_ok=True)
        extension = package / built.name
        cli = package / "bin" / "stoker"
        cli.parent.mkdir(exist_ok=True)
        shutil.copyfile(built, extension)
        shutil.copyfile(build_dir / "stoker", cli)
        os.chmod(cli, 0o755)
        share = package / "share" / "stoker"
        share.mkdir(parents=True, exist_ok=True)
        for f in ("compare.py", "torch_dataloader.py"):
            shutil.copyfile(HERE / "bench" / f, share / f)

        libs = package.parent / "stoker.libs"
        shutil.rmtree(libs, ignore_errors=True)
        bundled = bundle_libs.bundle([extension, cli], libs)
        for soname, (name, src) in sorted(bundled.items()):
            print(f"stoker wheel: {src} -> stoker.libs/{name}")
        torch = [s for s in bundled if re.match(r"lib(torch|c10)", s)]
        if torch:
            raise RuntimeError(f"the extension links {torch}; stoker must reach torch only over DLPack")

    def _cmake_build(self):
        given = os.environ.get("STOKER_CMAKE_BUILD_DIR")
        if given:
            build_dir = Path(given).resolve()
            if cached_version(build_dir) != project_version():
                raise RuntimeError(f"{build_dir} was configured for version {cached_version(build_dir)}, "
                                   f"CMakeLists.txt says {project_version()}: reconfigure it")
            return build_dir
        # Beside the source's own build/ (same depth), so a compiler cache set through
        # CMAKE_CXX_COMPILER_LAUNCHER=ccache (CMake reads it from the environment) hits
        # on what a developer build already compiled; kept for incremental rebuilds.
        build_dir = HERE / f"build-wheel-{sys.implementation.cache_tag}"
        cache = build_dir / "CMakeCache.txt"
        if cache.exists():
            configured = re.search(r"^Python_EXECUTABLE:\w+=(.*)$", cache.read_text(), re.M)
            if not configured or configured.group(1) != sys.executable:
                cache.unlink()  # another interpreter (or venv) of this version: configure anew
        configure = ["cmake", "-S", str(HERE), "-B", str(build_dir),
                     "-DCMAKE_BUILD_TYPE=Release", "-DSTOKER_BUILD_TESTS=OFF",
                     "-DSTOKER_BUILD_BENCH=OFF", "-DSTOKER_ENABLE_CUDA=OFF",
                     "-DSTOKER_PYTHON_REQUIRED=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("STOKER_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs,
                        "--target", "stoker_cli", "stoker_python"], check=True)
        return build_dir


setup(
    version=project_version(),
    packages=["stoker"],
    package_dir={"": "python"},
    package_data={"stoker": ["py.typed", "_stoker.pyi"]},
    # Built by CMakeBuild, not by setuptools; declaring it makes the wheel
    # platform-specific (cpXY-cpXY-linux_<arch>).
    ext_modules=[Extension("stoker._stoker", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    scripts=["python/scripts/stoker"],
    zip_safe=False,
    options={"build": {"build_base": os.environ.get("STOKER_SETUPTOOLS_BUILD_BASE", "build/setuptools")}},
)
