import sys, glob, os
from setuptools import setup
from Cython.Build import cythonize
mods = sys.argv[1:]
sys.argv = [sys.argv[0], "build_ext", "--inplace", "-j", "2"]
setup(ext_modules=cythonize(mods, nthreads=2, quiet=True, compiler_directives={
    "language_level": 3, "annotation_typing": False, "binding": True, "embedsignature": False,
    "always_allow_keywords": True}), script_args=sys.argv[1:])
