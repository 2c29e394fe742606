"""Turn the MODEL argument of the CLI into a torch.nn.Module, and shape strings into tuples.

MODEL is `zoo:<name>` (convdoctor.zoo) or `path/to/file.py:factory` (a function or class in that
file that returns/is a torch.nn.Module; called with no arguments). ONNX files are handled by
convdoctor.check.onnx_check, not here. Every failure is a UsageError with a message for a person.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from ..errors import UsageError

_SHAPE_SPLIT = re.compile(r"\s*[,xX×]\s*")
MAX_DIM = 2**31 - 1          # a larger tensor dimension is no input anyone runs
MAX_NUMEL = 2**50            # elements of one input (2**50 fp32 values are 4 PiB)


def parse_shape(text: Any, *, name: str = "shape", allow_zero: bool = True) -> tuple[int, ...]:
    """'8,3,224,224', '8x3x224x224', '(8, 3, 224, 224)' or a sequence of ints -> (8, 3, 224, 224)."""
    if isinstance(text, (tuple, list)):
        items = list(text)
    else:
        s = str(text).strip().strip("()[]").strip()
        if not s:
            raise UsageError(f"empty {name}; write it like 8,3,224,224 or 8x3x224x224")
        items = [p for p in _SHAPE_SPLIT.split(s)]
    dims: list[int] = []
    for p in items:
        try:
            v = int(str(p).strip())
        except ValueError:
            raise UsageError(f"cannot parse {name} {text!r}: {p!r} is not an integer; "
                             "write it like 8,3,224,224 or 8x3x224x224") from None
        if v < 0 or (v == 0 and not allow_zero):
            raise UsageError(f"bad {name} {text!r}: sizes must be {'>= 0' if allow_zero else '> 0'}, got {v}")
        if v > MAX_DIM:
            raise UsageError(f"bad {name}: the size {str(v)[:30]} is larger than {MAX_DIM}")
        dims.append(v)
    if not dims:
        raise UsageError(f"empty {name}; write it like 8,3,224,224 or 8x3x224x224")
    if len(dims) > 8:
        raise UsageError(f"bad {name}: {len(dims)} dims; a convolution input has 3 to 5")
    numel = 1
    for v in dims:
        numel *= v
    if numel > MAX_NUMEL:
        raise UsageError(f"bad {name} {'x'.join(map(str, dims))}: {numel:.3g} elements is more "
                         f"than any device holds (at most {MAX_NUMEL:.3g})")
    return tuple(dims)


def file_exists(path: Path, *, what: str) -> bool:
    """Path.exists, with a path the system refuses (too long, a loop) as a usage error."""
    try:
        return path.exists()
    except OSError as exc:
        raise UsageError(f"{what} {str(path)[:80]}{'...' if len(str(path)) > 80 else ''}: "
                         f"{exc.strerror}") from None


def split_spec(spec: str) -> tuple[str, str | None]:
    """'dir/m.py:make' -> ('dir/m.py', 'make'); Windows drive letters are not split."""
    if ":" in spec:
        path, _, attr = spec.rpartition(":")
        if path and not re.fullmatch(r"[A-Za-z]", path):
            return path, attr or None
    return spec, None


def load_model(spec: str) -> Any:
    """`zoo:<name>` or `path/to/file.py:factory` -> torch.nn.Module (UsageError on any problem)."""
    spec = str(spec).strip()
    if not spec:
        raise UsageError("empty MODEL; use zoo:<name>, path/to/file.py:factory or model.onnx")
    if spec.startswith("zoo:"):
        from .. import zoo

        return zoo.get(spec[4:])
    path_s, attr = split_spec(spec)
    path = Path(path_s)
    if path.suffix == ".onnx":
        raise UsageError(f"{spec} is an ONNX file; load it with convdoctor.check.onnx_check, "
                         "or run `convdoctor check model.onnx --input-shape ...`")
    if not file_exists(path, what="model file"):
        raise UsageError(f"model file not found: {path_s}",
                         hint="MODEL is zoo:<name>, path/to/file.py:factory or model.onnx")
    if path.is_dir() or path.suffix != ".py":
        raise UsageError(f"{path_s} is not a Python file; MODEL is zoo:<name>, path/to/file.py:factory "
                         "or model.onnx")
    if not attr:
        raise UsageError(f"say which factory in {path_s} builds the model: {path_s}:make_model",
                         hint="the factory is a function (or class) called with no arguments that "
                              "returns a torch.nn.Module")
    import torch

    mod_name = f"_convdoctor_user_model_{abs(hash(str(path.resolve())))}"
    try:
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise UsageError(f"cannot load {path_s} as a Python module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            loader_spec.loader.exec_module(module)
        finally:
            try:
                sys.path.remove(str(path.resolve().parent))
            except ValueError:
                pass
    except UsageError:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit in a script counts too
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError(f"{path_s} raised {type(exc).__name__} while being imported: {exc}",
                         hint=_where(exc, path)) from None
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        raise UsageError(f"{path_s} has no attribute {attr!r}",
                         hint=f"callables defined there: {', '.join(public[:12]) or 'none'}")
    factory = getattr(module, attr)
    if isinstance(factory, torch.nn.Module):
        return factory
    if not callable(factory):
        raise UsageError(f"{path_s}:{attr} is a {type(factory).__name__}, not a function, class or "
                         "torch.nn.Module")
    try:
        model = factory()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError(f"{path_s}:{attr}() raised {type(exc).__name__}: {exc}",
                         hint=_where(exc, path)) from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{path_s}:{attr}() returned a {type(model).__name__}, not a torch.nn.Module",
                         hint="the factory must return the model (e.g. `return MyNet()`)")
    return model


def _where(exc: BaseException, path: Path) -> str:
    """The last traceback line inside the user's file, so they know where to look."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == path.name]
    if frames:
        f = frames[-1]
        return f"at {path.name}:{f.lineno}: {(f.line or '').strip()}"
    return "run the file with python to see the full traceback"
