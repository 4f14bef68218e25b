"""Builds the admission kernel ahead of time: ``compiled``'s two functions as a C extension module.

    python -m placement.core.kernel.ahead_of_time [--output-dir DIR]

numba's ahead-of-time compiler (``numba.pycc``) turns the same functions the numba path compiles at run time
into ``admission_aot`` (a ``.so`` beside this package by default), for the index's dtypes (``SIGNATURES``).
The module needs numpy only: the service loads it without numba and without LLVM, for about 0.3 MB instead
of the 110 MB numba's compiler costs (docs/benchmarks.md), and ``placement.core.kernel.enable`` prefers it.
Building needs numba (the ``compiled`` extra) and a C compiler, once per install; ``SOURCE_DIGEST_FILE``
beside it records the digest of ``compiled.py`` it was built from, so that a module built from other rules
is refused rather than trusted (``enable`` falls back to the numpy path, saying so).

The functions are compiled for the generic CPU of the platform, not the build machine's: the module runs on
any machine the Python build does.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

MODULE = "admission_aot"
SOURCE_DIGEST_FILE = f"{MODULE}.source-sha256"
PACKAGE_DIR = Path(__file__).resolve().parent
COMPILED_SOURCE = PACKAGE_DIR / "compiled.py"


def source_digest() -> str:
    """The SHA-256 of ``compiled.py``: the rules an ahead-of-time module must have been built from."""
    return hashlib.sha256(COMPILED_SOURCE.read_bytes()).hexdigest()


# The exported functions' parameters, in order: (dtype, dimensions) for an array, a dtype alone for a scalar;
# and their results. The index's own dtypes (``vocabulary.NodeArrays``), as ``kernel._warm_up`` passes them.
Param = tuple[str, int] | str
ADMISSION_PARAMS: tuple[Param, ...] = (
    *(("i8", 1), ("i1", 1), ("i1", 1), ("i1", 1), ("b1", 1), ("b1", 1), ("u1", 2)),
    *(("f8", 3), ("f8", 3), ("f8", 2), ("f8", 1), ("i8", 1), ("f8", 1), "f8", "i8", "f8"),
    *(("i8", 1), ("f8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("f8", 1), "i8", "b1"),
)
ADMISSION_RESULT: tuple[Param, ...] = (("i8", 1), "b1")
PARTS_PARAMS: tuple[Param, ...] = (
    *(("i8", 1), ("i2", 2), ("f8", 3), ("f8", 3), ("i8", 1), ("f8", 1), "i8"),
    *(("f8", 2), ("f4", 2), ("f4", 1), ("f4", 2), ("f4", 1)),
)
PARTS_RESULT: tuple[Param, ...] = (("f8", 1), ("f4", 1), ("f8", 1), ("i8", 1))
_DTYPES: dict[str, type[np.generic]] = {
    "i1": np.int8,
    "i2": np.int16,
    "i8": np.int64,
    "u1": np.uint8,
    "f4": np.float32,
    "f8": np.float64,
}
_DTYPES_WITH_BOOL: dict[str, type[np.generic]] = {**_DTYPES, "b1": np.bool_}


class CheckedModule:
    """The built module's functions, each call's arrays checked against the signature first: compiled code
    reads memory as the signature says, so an array of another dtype would crash the process, not raise."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def admission_checks(self, *args: Any) -> Any:
        _check("admission_checks", ADMISSION_PARAMS, args)
        return self._module.admission_checks(*args)

    def node_parts(self, *args: Any) -> Any:
        _check("node_parts", PARTS_PARAMS, args)
        return self._module.node_parts(*args)


def _check(function: str, params: Sequence[Param], args: Sequence[Any]) -> None:
    if len(args) != len(params):
        raise TypeError(f"{function}: {len(args)} arguments, the module built ahead of time takes {len(params)}")
    for position, (param, arg) in enumerate(zip(params, args, strict=True)):
        if isinstance(param, tuple):
            dtype, ndim = _DTYPES_WITH_BOOL[param[0]], param[1]
            if not isinstance(arg, np.ndarray) or arg.dtype != dtype or arg.ndim != ndim:
                got = f"{arg.dtype} [{arg.ndim}-d]" if isinstance(arg, np.ndarray) else type(arg).__name__
                raise TypeError(
                    f"{function}: argument {position} is {got}, the module built ahead of time takes "
                    f"{np.dtype(dtype)} [{ndim}-d]"
                )


def build(output_dir: Path = PACKAGE_DIR) -> Path:
    """Compiles ``admission_aot`` into ``output_dir`` and records the source digest beside it; its path."""
    from numba.core.errors import NumbaPendingDeprecationWarning  # noqa: PLC0415 - build time only

    with warnings.catch_warnings():  # numba.pycc is "pending deprecation", with no successor yet
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        return _build(output_dir)


def _build(output_dir: Path) -> Path:
    from numba import types  # noqa: PLC0415 - the service never imports numba for this module
    from numba.pycc.cc import CC  # noqa: PLC0415

    from placement.core.kernel import compiled  # noqa: PLC0415 - imports numba

    scalars = {"b1": types.boolean, **{code: getattr(types, np.dtype(dtype).name) for code, dtype in _DTYPES.items()}}

    def numba_type(param: Param) -> Any:
        if isinstance(param, tuple):
            return types.Array(scalars[param[0]], param[1], "A")  # any layout: views as well as whole arrays
        return scalars[param]

    def signature(result: Sequence[Param], params: Sequence[Param]) -> Any:
        return types.Tuple(tuple(numba_type(r) for r in result))(*(numba_type(p) for p in params))

    output_dir.mkdir(parents=True, exist_ok=True)
    compiler = CC(MODULE)
    compiler.output_dir = str(output_dir)
    compiler.verbose = False
    compiler.export("admission_checks", signature(ADMISSION_RESULT, ADMISSION_PARAMS))(
        compiled.admission_checks.py_func
    )
    compiler.export("node_parts", signature(PARTS_RESULT, PARTS_PARAMS))(compiled.node_parts.py_func)
    compiler.compile()
    (output_dir / SOURCE_DIGEST_FILE).write_text(source_digest() + "\n")
    built = sorted(output_dir.glob(f"{MODULE}.*.so")) + sorted(output_dir.glob(f"{MODULE}.*.pyd"))
    if not built:
        raise RuntimeError(f"numba.pycc wrote no {MODULE} module into {output_dir}")
    return built[-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m placement.core.kernel.ahead_of_time", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output-dir", type=Path, default=PACKAGE_DIR, help="default: beside this package")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        path = build(args.output_dir)
    except ImportError as error:
        print(f"error: building the kernel needs numba (pip install '.[compiled]'): {error}", file=sys.stderr)
        return 1
    except Exception as error:  # a missing C compiler, an unwritable folder: one line, not a traceback
        print(f"error: the kernel was not built: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"built {path} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
