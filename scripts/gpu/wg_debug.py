"""One wgrad kernel configuration on one suite problem, in this process (wg_probe's crash hunt,
session 28, run on the first kernel version; programs per SM now ride in the configuration, "v<N>").
    python scripts/gpu/wg_debug.py NAME CONFIG   -> prints rel. error and time, or crashes"""
import math
import sys

import torch
import triton.testing as tt

from convdoctor.kernels import wgrad as wg
from convdoctor.tune.suites import load_suite

name, cfg = sys.argv[1], sys.argv[2]
e = next(e for e in load_suite("cnn-layers").entries if e.name == name)
p = e.problem(direction="wgrad")
x = torch.randn(p.x_shape(), device="cuda")
dy = torch.randn(p.y_shape(), device="cuda")
dw = torch.full(p.w_shape(), float("nan"), device="cuda")
sms = torch.cuda.get_device_properties(0).multi_processor_count
cf = wg.parse_config(cfg)
tiles = wg.tiles_of(p.k, p.c, p.kernel, cf)
L = p.n * math.prod(p.out_spatial())
print(p.key(), "tiles", tiles, "split/chunk", wg.split_for(tiles, L, cf.block_l, sms, cf.waves), "L", L, flush=True)
wg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg, tf32=True)
torch.cuda.synchronize()
w = torch.randn(p.w_shape(), device="cuda", dtype=torch.float64)
nd = p.ndim
ref = torch.ops.aten.convolution_backward(dy.double(), x.double(), w, None, list(p.stride), list(p.pad_pre), list(p.dilation), False, [0] * nd, 1, [False, True, False])[1]
print("rel_err", ((dw.double() - ref).norm() / ref.norm()).item(), flush=True)
print("us", tt.do_bench(lambda: wg.run(x, dy, dw, stride=p.stride, pad_pre=p.pad_pre, dilation=p.dilation, config=cfg, tf32=True), warmup=10, rep=50, return_mode="median") * 1e3)
