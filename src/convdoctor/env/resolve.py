"""Which libcudnn* files a framework process will load, and which it did load.

`probe_resolution` predicts the winner of each cuDNN soname with the ld.so(8) rules (DT_RPATH before
LD_LIBRARY_PATH, DT_RUNPATH after it, then the ld.so cache and the default dirs), starting from
libtorch_cuda.so's own RPATH/RUNPATH for libcudnn.so.N and from that shim's RUNPATH for the
sub-libraries it dlopens; it also records what the torch child really mapped.
"""

from __future__ import annotations

import os
from typing import Any

from .context import DEFAULT_DIRS, ProbeContext
from .facts import Fact


def _order(fact_libs: dict[str, Any], environ: dict[str, str], *, rpath: list[str], runpath: list[str],
           who: str) -> list[tuple[str, str]]:
    """ld.so(8) search order for a library needed/dlopened by an object with the given RPATH/RUNPATH."""
    ld = [(os.path.normpath(d), "LD_LIBRARY_PATH") for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    cache = [(d, "ld.so.cache") for d in fact_libs.get("ld_cache_dirs", [])]
    default = [(d, "default dirs") for d in DEFAULT_DIRS]
    if rpath and not runpath:
        return [(d, f"DT_RPATH of {who}") for d in rpath] + ld + cache + default
    return ld + [(d, f"DT_RUNPATH of {who}") for d in runpath] + cache + default


def _explain(label: str, who: str, rpath: list[str], runpath: list[str]) -> str:
    if label == "LD_LIBRARY_PATH":
        if runpath:
            return (f"{who} has DT_RUNPATH ({':'.join(runpath)}); ld.so searches LD_LIBRARY_PATH BEFORE "
                    "DT_RUNPATH, so the LD_LIBRARY_PATH copy wins")
        if rpath:
            return f"not found in {who}'s DT_RPATH, so ld.so fell back to LD_LIBRARY_PATH"
        return f"{who} has no RPATH/RUNPATH; ld.so searches LD_LIBRARY_PATH first"
    if label.startswith("DT_RPATH"):
        return f"{who} has DT_RPATH ({':'.join(rpath)}), searched BEFORE LD_LIBRARY_PATH"
    if label.startswith("DT_RUNPATH"):
        return f"{who}'s DT_RUNPATH ({':'.join(runpath)}); nothing earlier on LD_LIBRARY_PATH"
    if label == "ld.so.cache":
        return "found through /etc/ld.so.cache (ldconfig), searched after LD_LIBRARY_PATH and RUNPATH"
    return "found in the default system library directories"


def probe_resolution(ctx: ProbeContext) -> Fact:
    """Predict which libcudnn* files torch will load (ELF search rules) and record what it did load."""
    fact = Fact("resolution", sources=["ELF DT_RPATH/DT_RUNPATH + ld.so(8) search order"])
    libs = ctx.facts["libraries"].value
    tv = ctx.facts["torch"].value
    lt = tv.get("libtorch_cuda")
    env = dict(ctx.system.environ)
    copies = libs.get("copies", [])
    index: dict[tuple[str, str], dict[str, Any]] = {(c["dir"], c["name"]): c for c in copies}
    out: dict[str, Any] = {"framework": None}
    needed = (lt or {}).get("needed_cudnn") or []
    if lt and needed:
        main = needed[0]
        out["framework"] = "torch"
        rp, rnp = lt.get("rpath") or [], lt.get("runpath") or []
        order = _order(libs, env, rpath=rp, runpath=rnp, who="libtorch_cuda.so")
        pred: dict[str, Any] = {}
        win = next(((d, lab) for d, lab in order if (d, main) in index), None)
        own = next((d for d, lab in order if lab.startswith("DT_") and (d, main) in index), None)
        if own is None:
            site = os.path.dirname(tv.get("dir", ""))
            own = next((c["dir"] for c in copies if c["name"] == main and c["dir"].startswith(site + "/nvidia/")), None)
        if own is None and (os.path.join(tv.get("dir", ""), "lib"), main) in index:
            own = os.path.join(tv.get("dir", ""), "lib")
        out["own_dir"] = own
        if win:
            pred[main] = {"path": index[(win[0], main)]["path"], "dir": win[0], "via": win[1],
                          "rule": _explain(win[1], "libtorch_cuda.so", rp, rnp)}
            # the shim dlopens its sub-libraries by soname: its own RUNPATH decides
            shim = index[(win[0], main)]
            srp, srnp = shim.get("elf_rpath") or [], shim.get("elf_runpath") or []
            sub_order = _order(libs, env, rpath=srp, runpath=srnp, who=main)
            subs = sorted({c["name"] for c in copies if c["family"] == "cudnn-sub" and c["major"] == shim["major"]
                           and (own is None or c["dir"] == own or c["dir"] == win[0])})
            for sub in subs:
                w = next(((d, lab) for d, lab in sub_order if (d, sub) in index), None)
                if w:
                    pred[sub] = {"path": index[(w[0], sub)]["path"], "dir": w[0], "via": w[1],
                                 "rule": _explain(w[1], f"{main} ({shim['path']})", srp, srnp)}
        out["predicted"] = pred
    maps = (tv.get("maps") or {}).get("libs") or []
    out["loaded"] = [p for p in maps if os.path.basename(p).startswith("libcudnn")]
    out["loaded_source"] = "/proc/self/maps of a child that imported torch" + (
        " and ran a conv" if tv.get("conv_ok") is not None else "") if maps else None
    fact.value = out
    return fact


