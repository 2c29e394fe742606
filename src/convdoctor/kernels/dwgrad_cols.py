"""The column-blocked variant of the depthwise wgrad kernel (configurations "...x<V>").

    dw[c, 0, r, s] = sum over (n, oh, ow) of
                     dy[n, c, oh, ow] * x[n, c, oh*SH - PH + r, ow*SW - PW + s]

`convdoctor.kernels.dwgrad` gives each lane one output column and loads, per input row, a gather
of the KW column-shifted views of x: KW loads for KH*KW FMAs per tile row it meets. Here a lane
owns V consecutive output columns of one channel. All V columns add into the same KH*KW
accumulators (dw sums over columns), so a lane loads the (V-1)*SW + KW input columns its V columns
read once per input row and multiplies each against the V dy values it pairs with: loads per dy
element fall from about KW to (V-1)*SW/V + KW/V + 1, and the FMAs stay KH*KW. Every value is a
1-D tensor over the program's lanes (a Python tuple of them, unrolled at compile time), so the
tap and column registers are a lane's own by construction and Triton never spreads them over
lanes.

Lanes: BLOCK_C channels x G column groups (G*V columns per program); channels fastest where they
are contiguous (channels-last: a warp reads 32 consecutive channels of one column, whole lines),
else column groups. A program walks its chunk of row tiles as the lane-per-column kernel does: TH
output rows of one sample, the (TH-1)*SH + KH input rows they read, each once; a dy row is loaded
at its first use.

Exactness: lanes past the output width or C read nothing; where OW is not a multiple of V (RAGGED,
a compile-time constant) the lane holding the row's last columns multiplies through a select, so a
column past OW adds nothing, not even 0 * inf. So, as in the lane-per-column kernel, a non-finite x
makes exactly the taps non-finite that it does in PyTorch's sum.

Partial sums [S, KH*KW, C] and the fixed-order second pass are the lane-per-column kernel's.

Streamed rows (configurations "...x<V>s", STREAM): the same lanes and tiles, but a tile's rows go
through a run-time loop that keeps the ceil(KH/SH) latest dy rows in registers, so the body
unrolls KH*KW*V products whatever the tile's height: a tile can be a whole plane, each input row
is loaded once per tile, and a 7x7 configuration compiles in about 3 s instead of 8-18 s
(Triton 3.9, sm_90). It is not offered to the tuner: it has been checked against float64 under
Triton's interpreter, not yet timed on a GPU.
"""

from __future__ import annotations

import functools
from typing import Any

# the streamed tile body, a module global so that the kernel (compiled or interpreted) finds it;
# set by `kernel()` before the kernel is first built
_stream_tile: Any = None


@functools.lru_cache(maxsize=1)
def kernel() -> Any:
    import triton
    import triton.language as tl

    global _stream_tile
    _stream_tile = _stream_tile_fn()

    @triton.jit
    def dg_cols_kernel(x, dy, out, x_n, y_n, o_split, o_c, o_r, o_s, TILES, CHUNK,
                       C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, OH: tl.constexpr,
                       OW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                       x_c: tl.constexpr, x_h: tl.constexpr, x_w: tl.constexpr,
                       y_c: tl.constexpr, y_h: tl.constexpr, y_w: tl.constexpr,
                       KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                       TH: tl.constexpr, V: tl.constexpr, G: tl.constexpr,
                       BLOCK_C: tl.constexpr, CFAST: tl.constexpr, WIDE: tl.constexpr,
                       STREAM: tl.constexpr = False):
        # x, dy: the layer's input and output gradient; out: fp32 partials [S, KH*KW, C] or dw.
        NX: tl.constexpr = (TH - 1) * SH + KH      # input rows one tile reads
        WHOLE: tl.constexpr = TH == OH             # one tile per sample: row validity is static
        WB: tl.constexpr = (OW + G * V - 1) // (G * V)
        MW: tl.constexpr = (V - 1) * SW + KW       # input columns a lane reads per row
        RAGGED: tl.constexpr = OW % V != 0
        pid = tl.program_id(0)
        pid_s = tl.program_id(1)
        wb = pid % WB
        q = tl.arange(0, BLOCK_C * G)
        if CFAST:
            cq = q % BLOCK_C
            g = q // BLOCK_C
        else:
            cq = q // G
            g = q % G
        offs_c = (pid // WB) * BLOCK_C + cq
        col0 = (wb * G + g) * V
        if WIDE:
            offs_c = offs_c.to(tl.int64)
            col0 = col0.to(tl.int64)
        lane = (offs_c < C) & (col0 < OW)
        y_off = offs_c * y_c + col0 * y_w
        x_off = offs_c * x_c + (col0 * SW - PW) * x_w
        ym = ()
        for v in tl.static_range(V):
            ym = ym + (lane & (col0 + v < OW),)
        xm = ()
        for m in tl.static_range(MW):
            iw = col0 * SW - PW + m
            xm = xm + (lane & (iw >= 0) & (iw < W),)
        acc = ()
        for _k in tl.static_range(KH * KW):
            acc = acc + (tl.zeros((BLOCK_C * G,), dtype=tl.float32),)
        start = pid_s * CHUNK
        for tile in range(start, tl.minimum(start + CHUNK, TILES)):
            n = tl.cast(tile // (OH // TH), tl.int64)
            if WIDE:
                oh0 = tl.cast((tile % (OH // TH)) * TH, tl.int64)
            else:
                oh0 = tl.cast((tile % (OH // TH)) * TH, tl.int32)
            yb = dy + n * y_n + oh0 * y_h + y_off
            if STREAM:
                acc = _stream_tile(x, yb, acc, n, oh0, x_n, x_off, ym, xm, col0, H, OW, PH,
                                   x_h, x_w, y_h, y_w, KH, KW, SH, SW, TH, V, MW, RAGGED)
            dys = ()
            for j in tl.static_range(0 if STREAM else NX):
                if j % SH == 0 and j // SH < TH:   # tile row j // SH: first met at input row j
                    for v in tl.static_range(V):
                        dys = dys + (tl.load(yb + (j // SH) * y_h + v * y_w, mask=ym[v],
                                             other=0.0).to(tl.float32),)
                if not WHOLE or (j - PH >= 0 and j - PH < H):
                    ih = oh0 * SH + (j - PH)
                    xb = x + n * x_n + ih * x_h + x_off
                    xs = ()
                    for m in tl.static_range(MW):
                        if WHOLE:
                            mk = xm[m]
                        else:
                            mk = tl.where((ih >= 0) & (ih < H), xm[m], False)
                        xs = xs + (tl.load(xb + m * x_w, mask=mk, other=0.0).to(tl.float32),)
                    new = ()
                    for r in tl.static_range(KH):
                        # tap row r meets input row j in tile row (j - r) / SH
                        if j - r >= 0 and (j - r) % SH == 0 and (j - r) // SH < TH:
                            for s in tl.static_range(KW):
                                a = acc[r * KW + s]
                                for v in tl.static_range(V):
                                    p = dys[(j - r) // SH * V + v] * xs[v * SW + s]
                                    if RAGGED:
                                        a = a + tl.where(col0 + v < OW, p, -0.0)
                                    else:
                                        a = a + p
                                new = new + (a,)
                        else:
                            for s in tl.static_range(KW):
                                new = new + (acc[r * KW + s],)
                    acc = new
        # sum each accumulator over the column groups, per channel
        cs = (pid // WB) * BLOCK_C + tl.arange(0, BLOCK_C)
        o = out + (pid_s * WB + wb) * o_split + cs * o_c
        for k in tl.static_range(KH * KW):
            if CFAST:   # q = g * BLOCK_C + channel
                s = tl.sum(tl.reshape(acc[k], (G, BLOCK_C)), axis=0)
            else:       # q = channel * G + g
                s = tl.sum(tl.reshape(acc[k], (BLOCK_C, G)), axis=1)
            tl.store(o + (k // KW) * o_r + (k % KW) * o_s, s.to(out.dtype.element_ty),
                     mask=cs < C)

    return dg_cols_kernel


def _stream_tile_fn() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def _stream_tile(x, yb, acc, n, oh0, x_n, x_off, ym, xm, col0, H: tl.constexpr,
                     OW: tl.constexpr, PH: tl.constexpr, x_h: tl.constexpr, x_w: tl.constexpr,
                     y_h: tl.constexpr, y_w: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                     SH: tl.constexpr, SW: tl.constexpr, TH: tl.constexpr, V: tl.constexpr,
                     MW: tl.constexpr, RAGGED: tl.constexpr):
        # One row tile with its rows streamed (a run-time loop, so the body unrolls KH*KW*V
        # products whatever TH is): step k brings dy row k of the tile into a window of the ND
        # latest dy rows and reads the SH input rows SH*k + e - PH (e < SH) once each; input row
        # e pairs with window slot d = (r - e) / SH for the tap rows r = e (mod SH). A slot
        # holds a row of this tile only for 0 <= k - d < TH, and only then is it multiplied
        # (a uniform branch), so no product outside the definition reaches a tap.
        ND: tl.constexpr = (KH - 1) // SH + 1
        win = ()
        for _i in tl.static_range(ND * V):
            win = win + (tl.zeros_like(acc[0]),)
        for k in range(TH + ND - 1):
            fresh = ()
            for v in tl.static_range(V):
                fresh = fresh + (tl.load(yb + k * y_h + v * y_w,
                                         mask=tl.where(k < TH, ym[v], False),
                                         other=0.0).to(tl.float32),)
            for i in tl.static_range((ND - 1) * V):
                fresh = fresh + (win[i],)
            win = fresh
            for e in tl.static_range(SH):
                ih = oh0 * SH + k * SH + (e - PH)
                xb = x + n * x_n + ih * x_h + x_off
                xs = ()
                for m in tl.static_range(MW):
                    xs = xs + (tl.load(xb + m * x_w,
                                       mask=tl.where((ih >= 0) & (ih < H), xm[m], False),
                                       other=0.0).to(tl.float32),)
                for d in tl.static_range(ND):
                    if d * SH + e < KH:
                        if (k - d >= 0) & (k - d < TH):
                            new = ()
                            for r in tl.static_range(KH):
                                for s in tl.static_range(KW):
                                    a = acc[r * KW + s]
                                    if r == d * SH + e:
                                        for v in tl.static_range(V):
                                            p = win[d * V + v] * xs[v * SW + s]
                                            if RAGGED:
                                                a = a + tl.where(col0 + v < OW, p, -0.0)
                                            else:
                                                a = a + p
                                    new = new + (a,)
                            acc = new
        return acc

    return _stream_tile
