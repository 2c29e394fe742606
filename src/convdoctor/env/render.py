"""Human text for an env report: a short facts summary, then the findings."""

from __future__ import annotations

from typing import Any

from ..report import Report
from ..textsafe import clean


def _val(report: Report, name: str) -> dict[str, Any]:
    f = report.facts.get(name) or {}
    return f.get("value", {}) if isinstance(f, dict) else {}


def summary(report: Report) -> str:
    lines: list[str] = []
    d = _val(report, "driver")
    if d.get("present"):
        parts = [f"driver {d.get('version') or '?'}"]
        if d.get("kernel_module"):
            parts.append(f"kernel module {d['kernel_module']}")
        if d.get("cuda_driver"):
            parts.append(f"supports CUDA {d['cuda_driver']}")
        lines.append("driver:    " + ", ".join(parts))
    else:
        lines.append("driver:    none (no /proc/driver/nvidia, no NVML, no libcuda.so.1)")
    g = _val(report, "gpus")
    for dev in g.get("devices", []):
        clk = f"SM {dev.get('sm_clock_mhz', '?')}/{dev.get('sm_clock_max_mhz', '?')} MHz"
        lines.append(f"GPU {dev.get('index')}:     {dev.get('name', '?')}  sm_{str(dev.get('cc', '?')).replace('.', '')}  "
                     f"{dev.get('memory_total_mib', '?')} MiB  {clk}  {dev.get('temperature_c', '?')} C")
    if g.get("cuda_visible_devices") is not None:
        lines.append(f"           CUDA_VISIBLE_DEVICES={g['cuda_visible_devices']!r} -> visible {g.get('visible')}")
    t = _val(report, "torch")
    if t.get("installed"):
        s = f"torch:     {t.get('version')}  CUDA {t.get('cuda') or '- (CPU build)'}"
        if t.get("cudnn_compiled") or t.get("cudnn_runtime"):
            s += f"  cuDNN compiled {t.get('cudnn_compiled', '?')} / runtime {t.get('cudnn_runtime', '?')}"
        if t.get("arch_list"):
            s += f"  arch {' '.join(t['arch_list'])}"
        if t.get("cuda_available") is not None:
            s += f"  cuda_available={t['cuda_available']}"
        lines.append(s)
    else:
        lines.append("torch:     not installed")
    tf = _val(report, "tensorflow")
    if tf.get("installed"):
        lines.append(f"tensorflow: {tf.get('version', '?')}  CUDA {tf.get('cuda_version', '?')}  cuDNN {tf.get('cudnn_compiled') or tf.get('cudnn_version', '?')}")
    jx = _val(report, "jax")
    for p in jx.get("plugins", []):
        lines.append(f"jax:       jax_cuda{p['cuda_major']}_plugin {p['version']}")
    tr = _val(report, "triton")
    if tr.get("installed"):
        lines.append(f"triton:    {tr.get('version') or '?'}  (convdoctor's own kernels: tuner "
                     "candidates triton:dw_, triton:wg_, triton:sc_, triton:fp_)")
    elif t.get("installed") and t.get("cuda") and tr:
        lines.append("triton:    not installed (convdoctor's own kernels are not offered)")
    copies = [c for c in _val(report, "libraries").get("copies", []) if not c.get("same_file_as")]
    if copies:
        lines.append("libraries (search order; * = version inferred from its directory):")
        for c in copies:
            ver = (c.get("version") or "?") + ("*" if str(c.get("version_source", "")).startswith("inferred") else "")
            cm = f"cuda{c['cuda_major']}" if c.get("cuda_major") else "cuda?"
            real = f" -> {c['realpath']}" if c.get("realpath") and c["realpath"] != c["path"] else ""
            lines.append(f"  {c['name']:<40} {ver:<10} {cm:<7} {c['path']}{real}  [{c['via']}]")
    else:
        lines.append("libraries: no libcudnn/libcudart/libcublas/libnvrtc on any search path")
    r = _val(report, "resolution")
    if r.get("loaded"):
        lines.append(f"mapped by a torch process ({r.get('loaded_source')}):")
        lines.extend(f"  {p}" for p in r["loaded"])
    sm = _val(report, "smoke")
    if sm:
        if sm.get("ran"):
            cases = sm.get("cases", [])
            ok = sum(1 for c in cases if c.get("ok"))
            run = sum(1 for c in cases if not c.get("skipped"))
            lines.append(f"smoke:     {ok}/{run} conv cases correct ({sm.get('seconds', '?')} s)")
            for c in cases:
                errs = c.get("rel_err") or {}
                if errs:
                    worst = max(errs.values())
                    tf32_note = {True: ", TF32 took effect", False: ", TF32 did not change the result"}.get(c.get("tf32_effective"), "")
                    lines.append(f"           GPU {c.get('device')} {c.get('case'):<5} max rel err {worst:.1e} (tol {c.get('tol'):.0e}){tf32_note}")
        else:
            lines.append(f"smoke:     not run ({sm.get('error')})")
    h = _val(report, "host")
    if h:
        lines.append(f"host:      {h.get('hostname') or '?'}  {h.get('distro') or h.get('os') or '?'}"
                     f" ({h.get('machine') or '?'})  Python {h.get('python') or '?'}  convdoctor "
                     f"{h.get('convdoctor') or '?'}  {h.get('time') or ''}")
    return "\n".join(lines)


def render(report: Report, *, color: bool = False) -> str:
    body = report.render(color=color)
    n_err, n_warn = len(report.errors), len(report.warnings)
    n_info = len(report.findings) - n_err - n_warn
    head = clean(summary(report))    # paths and values come from the machine and its environment
    verdict = f"{n_err} error(s), {n_warn} warning(s), {n_info} info"
    return f"{head}\n\nfindings: {verdict}\n{body}" if body else f"{head}\n\nfindings: {verdict}"
