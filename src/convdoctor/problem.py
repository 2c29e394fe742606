"""One convolution problem, independent of any framework or backend.

A `ConvProblem` is what the tuner measures and what the tuning database is keyed on: the direction
(fprop, dgrad, wgrad), the sizes of a 1D/2D/3D convolution (padding may be asymmetric), dtype, math
mode (TF32 allowed or strict fp32), layout and the determinism requirement. It parses from and prints
to one canonical line of text (`key()`), so the same problem always gives the same database key.
"""

from __future__ import annotations

import math as _math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import UsageError

DIRECTIONS = ("fprop", "dgrad", "wgrad")
DTYPES = ("float32", "float16", "bfloat16")
MATH_MODES = ("tf32", "strict")
LAYOUTS = ("nchw", "nhwc")

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MAX_SIZE = 2**31 - 1     # the largest size, stride or padding a problem may have

_DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}
# 3D and 1D layouts map onto the two we model: channels-first or channels-last.
_LAYOUT_ALIASES = {
    "nchw": "nchw", "ncdhw": "nchw", "ncw": "nchw", "contiguous": "nchw", "contiguous_format": "nchw",
    "nhwc": "nhwc", "ndhwc": "nhwc", "nwc": "nhwc", "channels_last": "nhwc",
    "channels_last_3d": "nhwc",
}
_MATH_ALIASES = {"tf32": "tf32", "strict": "strict", "fp32": "strict", "ieee": "strict",
                 "highest": "strict", "high": "tf32"}
_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}

# Spatial names per dimensionality: input sizes and kernel sizes.
_SPATIAL_NAMES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}
_KERNEL_NAMES = {1: ("s",), 2: ("r", "s"), 3: ("t", "r", "s")}

_KNOWN_KEYS = ("n", "c", "k", "d", "h", "w", "t", "r", "s", "stride", "pad", "pad_pre", "pad_post",
               "dil", "dilation", "groups", "g", "dtype", "math", "layout", "det", "deterministic")

PARSE_HELP = (
    'expected e.g. "fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 dtype=float32 layout=nchw": '
    "a direction (fprop|dgrad|wgrad), n c k, input sizes (w | h w | d h w), kernel sizes "
    "(s | r s | t r s), optional stride= pad= (or pad_pre= pad_post=) dil= groups= "
    "(one value or one per spatial dim, comma-separated), dtype=float32|float16|bfloat16, "
    "math=tf32|strict, layout=nchw|nhwc, det=0|1"
)


def _tuple(value: Any, nd: int, what: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (int(value),) * nd
    t = tuple(int(v) for v in value)
    if len(t) == 1 and nd > 1:
        return t * nd
    if len(t) != nd:
        raise UsageError(f"{what} has {len(t)} values but the convolution has {nd} spatial dims")
    return t


def _bool(text: str, what: str) -> bool:
    v = text.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise UsageError(f"{what}={text!r} is not a boolean; use 0 or 1")


def _norm_dtype(value: str) -> str:
    v = str(value).strip().lower().removeprefix("torch.")
    if v not in _DTYPE_ALIASES:
        raise UsageError(f"unsupported dtype {value!r}; use one of float32, float16, bfloat16")
    return _DTYPE_ALIASES[v]


def _norm_layout(value: str) -> str:
    v = str(value).strip().lower().removeprefix("torch.")
    if v not in _LAYOUT_ALIASES:
        raise UsageError(f"unknown layout {value!r}; use nchw or nhwc (ncdhw/ndhwc for 3D)")
    return _LAYOUT_ALIASES[v]


def _norm_math(value: str) -> str:
    v = str(value).strip().lower()
    if v not in _MATH_ALIASES:
        raise UsageError(f"unknown math mode {value!r}; use tf32 (TF32 allowed) or strict")
    return _MATH_ALIASES[v]


@dataclass(frozen=True)
class ConvProblem:
    """A convolution to run: sizes are of the forward convolution, `direction` says which pass."""

    direction: str
    n: int
    c: int
    k: int
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad_pre: tuple[int, ...]
    pad_post: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1
    dtype: str = "float32"
    math: str = "tf32"
    layout: str = "nchw"
    deterministic: bool = False

    def __post_init__(self) -> None:
        nd = len(self.spatial)
        if nd not in (1, 2, 3):
            raise UsageError(f"a convolution has 1, 2 or 3 spatial dims, got {nd}")
        for name in ("kernel", "stride", "pad_pre", "pad_post", "dilation"):
            v = getattr(self, name)
            if len(v) != nd:
                raise UsageError(f"{name} has {len(v)} values but the input has {nd} spatial dims")
        if self.direction not in DIRECTIONS:
            raise UsageError(f"unknown direction {self.direction!r}; use fprop, dgrad or wgrad")
        if self.dtype not in DTYPES:
            raise UsageError(f"unsupported dtype {self.dtype!r}; use one of {', '.join(DTYPES)}")
        if self.math not in MATH_MODES:
            raise UsageError(f"unknown math mode {self.math!r}; use tf32 or strict")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}; use nchw or nhwc")
        for name in ("n", "c", "k", "groups"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if any(v < 1 for v in self.spatial + self.kernel + self.stride + self.dilation):
            raise UsageError("spatial sizes, kernel, stride and dilation must all be >= 1")
        if any(p < 0 for p in self.pad_pre + self.pad_post):
            raise UsageError("padding must be >= 0")
        if any(v > MAX_SIZE for v in (self.n, self.c, self.k, self.groups, *self.spatial,
                                      *self.kernel, *self.stride, *self.pad_pre, *self.pad_post,
                                      *self.dilation)):
            raise UsageError(f"every size, stride, padding and dilation must be at most {MAX_SIZE}")
        if self.c % self.groups or self.k % self.groups:
            raise UsageError(
                f"groups={self.groups} must divide both c={self.c} and k={self.k}")
        out = self._out()
        if any(o < 1 for o in out):
            raise UsageError(
                f"the output would be empty (output spatial {out}): the kernel (dilated) is larger "
                "than the padded input; use a larger input or more padding")

    # ---------------------------------------------------------------- sizes
    @property
    def ndim(self) -> int:
        return len(self.spatial)

    @property
    def depthwise(self) -> bool:
        """One group per channel, one output channel per group (groups == C == K > 1)."""
        return self.groups > 1 and self.groups == self.c == self.k

    def _out(self) -> tuple[int, ...]:
        return tuple(
            (i + pp + pq - dl * (kk - 1) - 1) // st + 1
            for i, kk, st, pp, pq, dl in zip(self.spatial, self.kernel, self.stride, self.pad_pre,
                                             self.pad_post, self.dilation, strict=True)
        )

    def out_spatial(self) -> tuple[int, ...]:
        return self._out()

    def x_shape(self) -> tuple[int, ...]:
        return (self.n, self.c, *self.spatial)

    def w_shape(self) -> tuple[int, ...]:
        return (self.k, self.c // self.groups, *self.kernel)

    def y_shape(self) -> tuple[int, ...]:
        return (self.n, self.k, *self._out())

    @property
    def symmetric_padding(self) -> bool:
        return self.pad_pre == self.pad_post

    def flops(self) -> int:
        """Multiply-adds x2 of the forward convolution; dgrad and wgrad do the same work."""
        return 2 * self.n * self.k * _math.prod(self._out()) * (self.c // self.groups) * _math.prod(
            self.kernel)

    def min_bytes(self) -> int:
        """Bytes a perfect kernel moves: read two of x, w, dy and write the third, once each."""
        elems = _math.prod(self.x_shape()) + _math.prod(self.w_shape()) + _math.prod(self.y_shape())
        return elems * DTYPE_BYTES[self.dtype]

    # ---------------------------------------------------------------- text
    def key(self) -> str:
        """Canonical text: every field, in a fixed order; `ConvProblem.parse(p.key()) == p`."""
        nd = self.ndim
        parts = [self.direction, f"n={self.n}", f"c={self.c}", f"k={self.k}"]
        parts += [f"{nm}={v}" for nm, v in zip(_SPATIAL_NAMES[nd], self.spatial, strict=True)]
        parts += [f"{nm}={v}" for nm, v in zip(_KERNEL_NAMES[nd], self.kernel, strict=True)]

        def j(t: tuple[int, ...]) -> str:
            return ",".join(str(v) for v in t)

        parts += [f"stride={j(self.stride)}", f"pad_pre={j(self.pad_pre)}",
                  f"pad_post={j(self.pad_post)}", f"dil={j(self.dilation)}",
                  f"groups={self.groups}", f"dtype={self.dtype}", f"math={self.math}",
                  f"layout={self.layout}", f"det={int(self.deterministic)}"]
        return " ".join(parts)

    def short(self) -> str:
        """A compact human label, e.g. `fprop 32x256x28x28 k256 3x3/1 fp32 nchw`."""
        dt = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[self.dtype]
        sp = "x".join(str(v) for v in self.spatial)
        kr = "x".join(str(v) for v in self.kernel)
        st = "x".join(str(v) for v in self.stride) if len(set(self.stride)) > 1 else str(
            self.stride[0])
        extra = f" g{self.groups}" if self.groups > 1 else ""
        if any(d > 1 for d in self.dilation):
            extra += " dil" + "x".join(str(v) for v in self.dilation)
        m = "" if self.dtype != "float32" else (" tf32" if self.math == "tf32" else " strict")
        return (f"{self.direction} {self.n}x{self.c}x{sp} k{self.k} {kr}/{st}{extra} {dt}{m} "
                f"{self.layout}")

    def __str__(self) -> str:
        return self.key()

    @classmethod
    def parse(cls, text: str) -> ConvProblem:
        """Parse `fprop n=32 c=256 h=28 w=28 k=256 r=3 s=3 pad=1 ...`; raises UsageError."""
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"empty problem; {PARSE_HELP}")
        tokens = text.replace(";", " ").split()
        direction = "fprop"
        given: str | None = None
        fields: dict[str, str] = {}
        for tok in tokens:
            if "=" not in tok:
                if tok.lower() in DIRECTIONS:
                    if given is not None:
                        raise UsageError(f"problem {text!r} names two directions ({given} and "
                                         f"{tok.lower()}); give one")
                    direction = given = tok.lower()
                    continue
                raise UsageError(f"cannot read {tok!r} in problem {text!r}; {PARSE_HELP}")
            name, _, value = tok.partition("=")
            name = name.strip().lower()
            if name not in _KNOWN_KEYS:
                raise UsageError(f"unknown field {name!r} in problem {text!r}; {PARSE_HELP}")
            if name in fields:
                raise UsageError(f"field {name!r} given twice in problem {text!r}")
            if not value:
                raise UsageError(f"field {name!r} has no value in problem {text!r}")
            fields[name] = value
        for req in ("n", "c", "k", "w"):
            if req not in fields:
                raise UsageError(f"problem {text!r} lacks {req}=; {PARSE_HELP}")

        def ints(name: str) -> tuple[int, ...]:
            raw = fields[name]
            try:
                vals = tuple(int(v) for v in raw.replace("x", ",").split(","))
            except ValueError:
                raise UsageError(f"{name}={raw!r} is not an integer (or comma-separated integers)"
                                 ) from None
            return vals

        def one(name: str) -> int:
            v = ints(name)
            if len(v) != 1:
                raise UsageError(f"{name}= takes one integer, got {fields[name]!r}")
            return v[0]

        nd = 3 if "d" in fields else 2 if "h" in fields else 1
        spatial = tuple(one(nm) for nm in _SPATIAL_NAMES[nd])
        knames = _KERNEL_NAMES[nd]
        for kn in _KERNEL_NAMES[3]:
            if kn in fields and kn not in knames:
                raise UsageError(f"kernel size {kn}= given for a {nd}D problem (input sizes "
                                 f"{'/'.join(_SPATIAL_NAMES[nd])}); {PARSE_HELP}")
        kernel = tuple(one(kn) if kn in fields else 1 for kn in knames)

        def per_dim(name: str, default: int) -> tuple[int, ...]:
            if name not in fields:
                return (default,) * nd
            return _tuple(ints(name), nd, name)

        stride = per_dim("stride", 1)
        dil_name = "dilation" if "dilation" in fields else "dil"
        dilation = per_dim(dil_name, 1)
        if "pad" in fields and ("pad_pre" in fields or "pad_post" in fields):
            raise UsageError("give either pad= or pad_pre=/pad_post=, not both")
        if "pad" in fields:
            pad_pre = pad_post = per_dim("pad", 0)
        else:
            pad_pre = per_dim("pad_pre", 0)
            pad_post = per_dim("pad_post", 0) if "pad_post" in fields else pad_pre
        groups = one("groups") if "groups" in fields else one("g") if "g" in fields else 1
        det_field = fields.get("det", fields.get("deterministic", "0"))
        return cls(
            direction=direction, n=one("n"), c=one("c"), k=one("k"), spatial=spatial,
            kernel=kernel, stride=stride, pad_pre=pad_pre, pad_post=pad_post, dilation=dilation,
            groups=groups, dtype=_norm_dtype(fields.get("dtype", "float32")),
            math=_norm_math(fields.get("math", "tf32")),
            layout=_norm_layout(fields.get("layout", "nchw")),
            deterministic=_bool(det_field, "det"),
        )

    # ---------------------------------------------------------------- dict
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("spatial", "kernel", "stride", "pad_pre", "pad_post", "dilation"):
            d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConvProblem:
        try:
            return cls(
                direction=str(d["direction"]), n=int(d["n"]), c=int(d["c"]), k=int(d["k"]),
                spatial=tuple(int(v) for v in d["spatial"]),
                kernel=tuple(int(v) for v in d["kernel"]),
                stride=tuple(int(v) for v in d["stride"]),
                pad_pre=tuple(int(v) for v in d["pad_pre"]),
                pad_post=tuple(int(v) for v in d["pad_post"]),
                dilation=tuple(int(v) for v in d["dilation"]),
                groups=int(d.get("groups", 1)), dtype=_norm_dtype(d.get("dtype", "float32")),
                math=_norm_math(d.get("math", "tf32")), layout=_norm_layout(d.get("layout", "nchw")),
                deterministic=bool(d.get("deterministic", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"not a convolution problem record ({type(exc).__name__}: {exc})"
                             ) from None

    def with_direction(self, direction: str) -> ConvProblem:
        from dataclasses import replace

        return replace(self, direction=direction)

    # ---------------------------------------------------------------- from a traced call
    @classmethod
    def from_conv_call(cls, call: Any, direction: str = "fprop", *, math: str = "tf32",
                       deterministic: bool = False) -> ConvProblem:
        """The problem cuDNN sees for one traced call (`convdoctor.check.trace.ConvCall`).

        A transposed convolution's forward pass is the dgrad of the ordinary convolution with the
        same weight (and its dgrad is that convolution's fprop), so it maps onto that problem, with
        input = the transposed convolution's output. Non-zero padding modes (reflect, replicate,
        circular) are applied by PyTorch as a separate pad, so cuDNN sees a padded input, pad 0.
        """
        x_shape = tuple(int(v) for v in call.x_shape)
        w_shape = tuple(int(v) for v in call.w_shape)
        y_shape = tuple(int(v) for v in call.y_shape) if getattr(call, "y_shape", None) else None
        nd = len(x_shape) - 2
        if nd not in (1, 2, 3) or len(w_shape) != nd + 2:
            raise UsageError(f"cannot map a convolution with input {x_shape} and weight {w_shape} "
                             "onto a 1D/2D/3D problem")
        groups = int(getattr(call, "groups", 1) or 1)
        kernel = w_shape[2:]
        stride = _tuple(getattr(call, "stride", 1), nd, "stride")
        dilation = _tuple(getattr(call, "dilation", 1), nd, "dilation")
        padding = getattr(call, "padding", 0)
        padding_mode = str(getattr(call, "padding_mode", "zeros") or "zeros")
        transposed = bool(getattr(call, "transposed", False))
        if isinstance(padding, str):
            if padding == "valid":
                pre = post = (0,) * nd
            elif padding == "same":
                totals = [dl * (kk - 1) for dl, kk in zip(dilation, kernel, strict=True)]
                pre = tuple(t // 2 for t in totals)
                post = tuple(t - t // 2 for t in totals)
            else:
                raise UsageError(f"unknown padding {padding!r} (expected an int, a tuple, "
                                 "'same' or 'valid')")
        else:
            pre = post = _tuple(padding, nd, "padding")
        if transposed:
            if y_shape is None:
                raise UsageError("a transposed convolution needs its output shape to be mapped")
            # ConvTranspose weight: (C_in, C_out/groups, k...). The equivalent conv maps C_out -> C_in.
            k_ch = w_shape[0]
            c_ch = w_shape[1] * groups
            spatial = y_shape[2:]
            n = y_shape[0]
            direction = {"fprop": "dgrad", "dgrad": "fprop", "wgrad": "wgrad"}.get(direction,
                                                                                    direction)
        else:
            n, c_ch, spatial = x_shape[0], x_shape[1], x_shape[2:]
            k_ch = w_shape[0]
            if padding_mode != "zeros":
                spatial = tuple(s + a + b for s, a, b in zip(spatial, pre, post, strict=True))
                pre = post = (0,) * nd
        mem = str(getattr(call, "memory_format", "") or "contiguous").lower().removeprefix("torch.")
        layout = "nhwc" if "channels_last" in mem or mem in ("nhwc", "ndhwc", "nwc") else "nchw"
        dtype = _norm_dtype(str(getattr(call, "dtype", "float32")))
        return cls(direction=direction, n=n, c=c_ch, k=k_ch, spatial=tuple(spatial),
                   kernel=tuple(kernel), stride=stride, pad_pre=tuple(pre), pad_post=tuple(post),
                   dilation=dilation, groups=groups, dtype=dtype, math=_norm_math(math),
                   layout=layout, deterministic=deterministic)
