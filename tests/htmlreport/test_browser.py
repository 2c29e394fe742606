"""A real browser renders the page: headless Chromium (Debian's `chromium` package) takes a
screenshot, and the screenshot's pixels show the plots in their colours; dark mode turns the page
dark; printing gives a PDF of several pages. Skipped where Chromium is not installed."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from reportdata import BENCH_FP16_WGRAD

from convdoctor.htmlreport.build import Request, gather
from convdoctor.htmlreport.page import render_page

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="needs headless Chromium (apt-get "
                                "install chromium)")

# the page's backgrounds (report.css), light and dark
LIGHT_BG, DARK_BG = (0xFF, 0xFF, 0xFF), (0x15, 0x18, 0x1C)


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = ctype = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(v for i, v in enumerate(line) if bpp == 3 or i % 4 != 3))
        prev = line
    return width, height, rows


def coloured(rows: list[bytes]) -> int:
    """Pixels of a saturated colour (the plots' marks; text and grid lines are grey)."""
    n = 0
    for row in rows:
        for i in range(0, len(row), 3):
            r, g, b = row[i], row[i + 1], row[i + 2]
            if max(r, g, b) - min(r, g, b) > 60:
                n += 1
    return n


def headless(out: Path) -> list[str]:
    """Chromium headless with a profile of its own next to `out`, so that browsers started by
    tests running at the same time (pytest-xdist) never share one."""
    assert BROWSER is not None
    return [BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={out.parent / (out.name + '.profile')}"]


# the page is laid out at 1200x1600 CSS pixels and shot at half the device scale: the same layout,
# a quarter of the pixels for this module's pure-Python PNG decoder
SCALE = 0.5
MARKS = 750     # saturated pixels the plots give at least (3000 at full scale)


def shoot(page: Path, out: Path, *flags: str, size: str = "1200,1600") -> bytes:
    subprocess.run([*headless(out), "--hide-scrollbars", *flags, f"--screenshot={out}",
                    f"--window-size={size}", f"--force-device-scale-factor={SCALE}",
                    page.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert out.is_file(), "chromium wrote no screenshot"
    return out.read_bytes()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The roofline and bench of the real fp16 wgrad pass, first on the page (so the plots are
    in the first screen)."""
    inp = gather(Request(benches=(str(BENCH_FP16_WGRAD),)))
    html = render_page(inp, only=("roofline", "bench")).html
    p = tmp_path_factory.mktemp("page") / "report.html"
    p.write_text(html, encoding="utf-8")
    return p


def test_screenshot_shows_the_plots(page: Path, tmp_path: Path) -> None:
    w, h, rows = read_png(shoot(page, tmp_path / "shot.png"))
    assert (w, h) == (int(1200 * SCALE), int(1600 * SCALE))
    assert rows[5][:3] == bytes(LIGHT_BG)
    # the same page without its SVG elements: the colour on the screenshot is the plots'
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"<svg.*?</svg>", "", page.read_text(), flags=re.S))
    _, _, bare_rows = read_png(shoot(bare, tmp_path / "bare.png"))
    with_plots, without = coloured(rows), coloured(bare_rows)
    assert with_plots > MARKS and with_plots > 5 * without, (with_plots, without)


def test_dark_mode_and_print(page: Path, tmp_path: Path) -> None:
    _, _, rows = read_png(shoot(page, tmp_path / "dark.png", "--force-dark-mode"))
    assert rows[5][:3] == bytes(DARK_BG) and coloured(rows) > MARKS
    pdf = tmp_path / "page.pdf"
    subprocess.run([*headless(pdf), "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    page.as_uri()], capture_output=True, timeout=120, check=False)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    assert len(re.findall(rb"/Type\s*/Page[^s]", data)) >= 2
