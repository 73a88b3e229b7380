"""Build the shardkit extension against libshardkit.

Where libshardkit comes from, first found:

1. SHARDKIT_BUILD: a configured and built shardkit tree (the README's
   set-up leaves one in build/), with the sources in SHARDKIT_SRC or the
   folder above this one. Its libshardkit.so.0 goes into the wheel beside
   the extension, which finds it through an $ORIGIN run path: the wheel
   works without installing the C library.
2. ../build beside this folder, when it holds a built libshardkit.
3. An installed libshardkit ("make install"), through pkg-config; the
   extension keeps its library folder as run path.

The version is the C tools' own: AC_INIT in configure.ac (or, for an
installed library, pkg-config's).
"""

import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def source_tree():
    src = os.environ.get("SHARDKIT_SRC") or os.path.dirname(HERE)
    if os.path.isfile(os.path.join(src, "include", "shardkit.h")):
        return src
    return None


def built_library(build):
    libs = os.path.join(build, "lib", ".libs")
    so = os.path.join(libs, "libshardkit.so.0")
    return so if os.path.exists(so) else None


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "shardkit"],
                             check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def find_shardkit():
    """(include dirs, library dir, bundled .so or None, version)."""
    src = source_tree()
    build = os.environ.get("SHARDKIT_BUILD")
    if build is None and src is not None:
        build = os.path.join(src, "build")
    if build is not None:
        so = built_library(build)
        if so is not None:
            if src is None:
                raise SystemExit(
                    "setup.py: SHARDKIT_BUILD=%s, but no shardkit sources "
                    "(include/shardkit.h) in SHARDKIT_SRC or %s"
                    % (build, os.path.dirname(HERE)))
            with open(os.path.join(src, "configure.ac")) as f:
                m = re.search(r"AC_INIT\(\[shardkit\],\s*\[([^\]]+)\]",
                              f.read())
            if m is None:
                raise SystemExit("setup.py: no AC_INIT version in "
                                 + os.path.join(src, "configure.ac"))
            return ([os.path.join(src, "include")], os.path.dirname(so),
                    so, m.group(1))
        if "SHARDKIT_BUILD" in os.environ:
            raise SystemExit(
                "setup.py: SHARDKIT_BUILD=%s holds no built "
                "lib/.libs/libshardkit.so.0: build shardkit there first"
                % build)
    version = pkg_config("--modversion")
    if version is None:
        raise SystemExit(
            "setup.py: libshardkit not found: build shardkit (./quickstart "
            "demo leaves it in build/), or set SHARDKIT_BUILD to a built "
            "tree, or install it (make install) where pkg-config finds "
            "shardkit.pc")
    incs = [f[2:] for f in pkg_config("--cflags-only-I").split()]
    return incs, pkg_config("--variable=libdir"), None, version


INCLUDES, LIBDIR, BUNDLED, VERSION = find_shardkit()


class BuildExt(build_ext):
    """Put the build tree's libshardkit beside the extension."""

    def run(self):
        super().run()
        if BUNDLED is None:
            return
        dests = [os.path.join(self.build_lib, "shardkit")]
        if self.inplace:
            dests.append(os.path.join(HERE, "src", "shardkit"))
        for d in dests:
            os.makedirs(d, exist_ok=True)
            # the real file under its soname, not the symlink chain
            shutil.copyfile(os.path.realpath(BUNDLED),
                            os.path.join(d, "libshardkit.so.0"))


rpath = "$ORIGIN" if BUNDLED is not None else LIBDIR

setup(
    version=VERSION,
    ext_modules=[Extension(
        "shardkit._shardkit",
        sources=["src/shardkit/_shardkit.c"],
        include_dirs=INCLUDES,
        library_dirs=[LIBDIR],
        libraries=["shardkit"],
        extra_compile_args=["-std=gnu11", "-Wall", "-Wextra",
                            "-Wno-missing-field-initializers",
                            "-Wno-cast-function-type", "-Wno-unused-parameter"],
        extra_link_args=["-Wl,-rpath," + rpath],
        py_limited_api=True,
    )],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
