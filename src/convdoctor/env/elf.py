"""Read the dynamic section of an ELF shared library: DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH.

Only the few bytes needed are read (headers, the dynamic segment, the string table entries), so a
1 GB engine library costs microseconds. Never raises: a bad file gives an `error` string.
Why: whether a library carries DT_RPATH (searched BEFORE LD_LIBRARY_PATH) or DT_RUNPATH (AFTER)
decides which copy of libcudnn wins; see ld.so(8).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 14, 15, 29


@dataclass
class ElfDynamic:
    needed: list[str] = field(default_factory=list)
    soname: str | None = None
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"needed": self.needed, "soname": self.soname, "rpath": self.rpath,
                "runpath": self.runpath, "error": self.error}


def _cstr(f: BinaryIO, off: int) -> str:
    f.seek(off)
    chunk = f.read(4096)
    end = chunk.find(b"\0")
    return (chunk if end < 0 else chunk[:end]).decode("utf-8", "replace")


def read_dynamic(f: BinaryIO) -> ElfDynamic:
    out = ElfDynamic()
    try:
        ident = f.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF":
            out.error = "not an ELF file"
            return out
        if ident[4] != 2 or ident[5] != 1:
            out.error = "not a 64-bit little-endian ELF"
            return out
        phoff, = struct.unpack_from("<Q", ident, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", ident, 0x36)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        loads: list[tuple[int, int, int]] = []
        dyn: tuple[int, int] | None = None
        for i in range(phnum):
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", ph, i * phentsize)
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_DYNAMIC:
                dyn = (p_offset, p_filesz)
        if dyn is None:
            out.error = "no dynamic segment"
            return out
        f.seek(dyn[0])
        raw = f.read(dyn[1])
        entries: list[tuple[int, int]] = []
        for i in range(0, len(raw) - 15, 16):
            tag, val = struct.unpack_from("<qQ", raw, i)
            if tag == DT_NULL:
                break
            entries.append((tag, val))
        strtab_vaddr = next((v for t, v in entries if t == DT_STRTAB), None)
        if strtab_vaddr is None:
            out.error = "no string table"
            return out
        strtab_off = None
        for vaddr, off, size in loads:
            if vaddr <= strtab_vaddr < vaddr + size:
                strtab_off = strtab_vaddr - vaddr + off
                break
        if strtab_off is None:
            out.error = "string table outside loaded segments"
            return out
        for tag, val in entries:
            if tag == DT_NEEDED:
                out.needed.append(_cstr(f, strtab_off + val))
            elif tag == DT_SONAME:
                out.soname = _cstr(f, strtab_off + val)
            elif tag == DT_RPATH:
                out.rpath = [p for p in _cstr(f, strtab_off + val).split(":") if p]
            elif tag == DT_RUNPATH:
                out.runpath = [p for p in _cstr(f, strtab_off + val).split(":") if p]
    except (OSError, struct.error, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def expand_origin(entries: list[str], origin: str) -> list[str]:
    """Replace $ORIGIN / ${ORIGIN} with the library's directory, as ld.so does."""
    import os.path

    return [os.path.normpath(e.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)) for e in entries]
