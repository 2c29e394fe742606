"""Build templates/cuda_errors.json: every cudaError_t and CUresult with its cause.

The runtime descriptions are what ``cudaGetErrorString`` returns, read from the
real libcudart of each CUDA runtime named on the command line (the function
needs no driver and no GPU).  The long descriptions are the doc comments of
``driver_types.h`` and ``cuda.h``.  The legacy numbering (CUDA <= 10.0, still
printed by old logs as "cuda runtime error (48)") comes from a transcription of
the CUDA 7-era enum.

Usage:
    python tools/mine_templates/build_cuda_errors.py \
        --cudart 13.0.96=/usr/local/cuda-13.0/lib/libcudart.so.13 \
        --cudart 12.4.127=.../libcudart.so.12 --cudart 11.8.89=.../libcudart.so.11.0 \
        --driver-types /usr/local/cuda-13.0/include/driver_types.h \
        --cuda-h /usr/local/cuda-13.0/include/cuda.h
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "src/convdoctor/explain/data/templates/cuda_errors.json"

LEGACY_SOURCE = {
    "repo": "andreaferretti/linear-algebra",
    "file": "private/cuda/types.nim",
    "version": "067364b02c6b405d31ce04dd56ff0508d4f335e0",
    "note": "Nim transcription of the CUDA 7.x driver_types.h enum cudaError; CUDA <= 10.0 used "
    "this numbering, CUDA 10.1 renumbered the runtime codes to match the driver API.",
}
# name -> number under the CUDA <= 10.0 numbering (transcribed from LEGACY_SOURCE).
LEGACY = {
    "cudaErrorMissingConfiguration": 1, "cudaErrorMemoryAllocation": 2,
    "cudaErrorInitializationError": 3, "cudaErrorLaunchFailure": 4,
    "cudaErrorPriorLaunchFailure": 5, "cudaErrorLaunchTimeout": 6,
    "cudaErrorLaunchOutOfResources": 7, "cudaErrorInvalidDeviceFunction": 8,
    "cudaErrorInvalidConfiguration": 9, "cudaErrorInvalidDevice": 10,
    "cudaErrorInvalidValue": 11, "cudaErrorInvalidPitchValue": 12, "cudaErrorInvalidSymbol": 13,
    "cudaErrorMapBufferObjectFailed": 14, "cudaErrorUnmapBufferObjectFailed": 15,
    "cudaErrorInvalidHostPointer": 16, "cudaErrorInvalidDevicePointer": 17,
    "cudaErrorInvalidTexture": 18, "cudaErrorInvalidTextureBinding": 19,
    "cudaErrorInvalidChannelDescriptor": 20, "cudaErrorInvalidMemcpyDirection": 21,
    "cudaErrorAddressOfConstant": 22, "cudaErrorTextureFetchFailed": 23,
    "cudaErrorTextureNotBound": 24, "cudaErrorSynchronizationError": 25,
    "cudaErrorInvalidFilterSetting": 26, "cudaErrorInvalidNormSetting": 27,
    "cudaErrorMixedDeviceExecution": 28, "cudaErrorCudartUnloading": 29, "cudaErrorUnknown": 30,
    "cudaErrorNotYetImplemented": 31, "cudaErrorMemoryValueTooLarge": 32,
    "cudaErrorInvalidResourceHandle": 33, "cudaErrorNotReady": 34,
    "cudaErrorInsufficientDriver": 35, "cudaErrorSetOnActiveProcess": 36,
    "cudaErrorInvalidSurface": 37, "cudaErrorNoDevice": 38, "cudaErrorECCUncorrectable": 39,
    "cudaErrorSharedObjectSymbolNotFound": 40, "cudaErrorSharedObjectInitFailed": 41,
    "cudaErrorUnsupportedLimit": 42, "cudaErrorDuplicateVariableName": 43,
    "cudaErrorDuplicateTextureName": 44, "cudaErrorDuplicateSurfaceName": 45,
    "cudaErrorDevicesUnavailable": 46, "cudaErrorInvalidKernelImage": 47,
    "cudaErrorNoKernelImageForDevice": 48, "cudaErrorIncompatibleDriverContext": 49,
    "cudaErrorPeerAccessAlreadyEnabled": 50, "cudaErrorPeerAccessNotEnabled": 51,
    "cudaErrorDeviceAlreadyInUse": 54, "cudaErrorProfilerDisabled": 55,
    "cudaErrorProfilerNotInitialized": 56, "cudaErrorProfilerAlreadyStarted": 57,
    "cudaErrorProfilerAlreadyStopped": 58, "cudaErrorAssert": 59, "cudaErrorTooManyPeers": 60,
    "cudaErrorHostMemoryAlreadyRegistered": 61, "cudaErrorHostMemoryNotRegistered": 62,
    "cudaErrorOperatingSystem": 63, "cudaErrorPeerAccessUnsupported": 64,
    "cudaErrorLaunchMaxDepthExceeded": 65, "cudaErrorLaunchFileScopedTex": 66,
    "cudaErrorLaunchFileScopedSurf": 67, "cudaErrorSyncDepthExceeded": 68,
    "cudaErrorLaunchPendingCountExceeded": 69, "cudaErrorNotPermitted": 70,
    "cudaErrorNotSupported": 71, "cudaErrorHardwareStackError": 72,
    "cudaErrorIllegalInstruction": 73, "cudaErrorMisalignedAddress": 74,
    "cudaErrorInvalidAddressSpace": 75, "cudaErrorInvalidPc": 76, "cudaErrorIllegalAddress": 77,
    "cudaErrorInvalidPtx": 78, "cudaErrorInvalidGraphicsContext": 79,
    "cudaErrorStartupFailure": 127,
}

# Modern code number (runtime and driver share it since CUDA 10.1) -> (causes, role, rationale).
F, C, N = "failure", "context", "noise"
CAUSES: dict[int, tuple[dict[str, float], str, str]] = {
    1: ({"unsupported-config": 0.4, "empty-tensor": 0.2, "tensor-too-large": 0.2, "unknown": 0.2}, C,
        "a parameter out of range: a launch or copy built from bad sizes; says little alone"),
    2: ({"gpu-out-of-memory": 1.0}, F, "the allocation of device memory failed"),
    3: ({"no-driver": 0.4, "driver-library-mismatch": 0.3, "driver-too-old": 0.2, "unknown": 0.1}, F,
        "the driver and runtime could not be initialised: no usable driver, a half-upgraded one, or a fork after CUDA init"),
    4: ({"unknown": 1.0}, C, "called during process shutdown after the driver was unloaded; a symptom of an earlier failure"),
    5: ({"harmless-warning": 1.0}, N, "profiler state only"),
    6: ({"harmless-warning": 1.0}, N, "profiler state only (deprecated)"),
    7: ({"harmless-warning": 1.0}, N, "profiler state only (deprecated)"),
    8: ({"harmless-warning": 1.0}, N, "profiler state only (deprecated)"),
    9: ({"unsupported-config": 0.6, "tensor-too-large": 0.3, "empty-tensor": 0.1}, F,
         "the launch asks for more threads, blocks or shared memory than the device has: shapes beyond a kernel's grid limit"),
    34: ({"no-driver": 0.7, "missing-dependency-lib": 0.3}, F,
         "the libcuda found is the toolkit's stub, not a real driver: no driver in this environment"),
    35: ({"driver-too-old": 1.0}, F, "the installed driver is older than the CUDA runtime"),
    36: ({"driver-too-old": 1.0}, F, "the API call needs a newer driver than the one installed"),
    46: ({"no-driver": 0.6, "hardware-fault": 0.2, "gpu-out-of-memory": 0.2}, F,
         "all devices busy or unavailable: exclusive/prohibited compute mode, another process holds them, or a failed GPU"),
    49: ({"unknown": 1.0}, C, "the current context was made by another API version"),
    52: ({"unknown": 1.0}, C, "kernel launched without configuration (deprecated)"),
    53: ({"illegal-memory-access": 0.6, "unknown": 0.4}, F, "a previous launch failed"),
    65: ({"unsupported-config": 1.0}, F, "dynamic-parallelism launch limit"),
    66: ({"unsupported-config": 1.0}, F, "kernel uses unsupported file-scoped textures"),
    67: ({"unsupported-config": 1.0}, F, "kernel uses unsupported file-scoped surfaces"),
    68: ({"unsupported-config": 1.0}, F, "device-runtime sync depth exceeded"),
    69: ({"unsupported-config": 1.0}, F, "device-runtime pending launch count exceeded"),
    98: ({"arch-unsupported": 0.9, "unknown": 0.1}, F,
         "the device function does not exist or is not compiled for this device's architecture"),
    100: ({"no-driver": 1.0}, F, "the driver sees no CUDA-capable device (none installed, none passed to the container, or CUDA_VISIBLE_DEVICES hides them)"),
    101: ({"no-driver": 0.8, "unknown": 0.2}, F, "the device ordinal does not exist: a bad CUDA_VISIBLE_DEVICES or device index"),
    102: ({"no-driver": 0.6, "unknown": 0.4}, F, "a vGPU without a valid grid license"),
    103: ({"hardware-fault": 0.5, "driver-library-mismatch": 0.5}, F, "driver integrity checks failed"),
    127: ({"no-driver": 0.4, "driver-library-mismatch": 0.3, "driver-too-old": 0.3}, F, "the CUDA runtime failed to start"),
    200: ({"arch-unsupported": 0.7, "driver-too-old": 0.3}, F, "the device kernel image is invalid for this device/driver"),
    201: ({"unknown": 0.7, "device-mismatch": 0.3}, C, "invalid device context (often a CUDA context used after fork or on the wrong device)"),
    202: ({"unknown": 1.0}, C, "context already current"),
    205: ({"unknown": 1.0}, C, "graphics interop mapping failed"),
    206: ({"unknown": 1.0}, C, "graphics interop unmapping failed"),
    207: ({"unknown": 1.0}, C, "graphics interop state"),
    208: ({"unknown": 1.0}, C, "graphics interop state"),
    209: ({"arch-unsupported": 1.0}, F, "no kernel image in the binary for this GPU's compute capability"),
    210: ({"unknown": 1.0}, C, "graphics interop state"),
    211: ({"unknown": 1.0}, C, "graphics interop state"),
    212: ({"unknown": 1.0}, C, "graphics interop state"),
    213: ({"unknown": 1.0}, C, "graphics interop state"),
    214: ({"hardware-fault": 1.0}, F, "an uncorrectable ECC memory error was detected"),
    215: ({"unsupported-config": 1.0}, F, "the limit is not supported on this architecture"),
    216: ({"no-driver": 0.7, "unknown": 0.3}, F, "the exclusive-mode device is in use by another thread/process"),
    217: ({"unsupported-config": 1.0}, F, "peer access between these devices is not supported"),
    218: ({"driver-too-old": 0.6, "arch-unsupported": 0.4}, F,
          "PTX JIT compilation failed: PTX newer than the driver's JIT, or no PTX for this arch"),
    219: ({"unknown": 1.0}, C, "invalid OpenGL/DirectX context"),
    220: ({"hardware-fault": 1.0}, F, "an uncorrectable NVLink error"),
    221: ({"missing-dependency-lib": 0.8, "driver-library-mismatch": 0.2}, F,
          "the PTX JIT compiler library (libnvidia-ptxjitcompiler) is not found"),
    222: ({"driver-too-old": 0.9, "arch-unsupported": 0.1}, F,
          "the PTX was produced by a newer toolchain than the driver supports"),
    223: ({"arch-unsupported": 0.8, "unknown": 0.2}, F, "PTX JIT is disabled and no SASS exists for this GPU"),
    224: ({"unsupported-config": 1.0}, F, "execution affinity not supported"),
    225: ({"unsupported-config": 1.0}, F, "PTX calls cudaDeviceSynchronize from the device, unsupported"),
    226: ({"hardware-fault": 0.7, "illegal-memory-access": 0.3}, F, "invalid peer memory access over NVLink or a hardware error"),
    300: ({"arch-unsupported": 0.5, "unknown": 0.5}, F, "the device kernel source/image is invalid"),
    301: ({"missing-dependency-lib": 0.6, "unknown": 0.4}, F, "a file (module) was not found"),
    302: ({"missing-dependency-lib": 0.6, "driver-library-mismatch": 0.4}, F, "a shared-object symbol failed to resolve"),
    303: ({"missing-dependency-lib": 0.5, "driver-library-mismatch": 0.5}, F, "a shared object failed to initialise"),
    304: ({"no-driver": 0.5, "unknown": 0.5}, F, "an OS call failed (e.g. /dev/nvidia* not accessible)"),
    400: ({"unknown": 0.7, "device-mismatch": 0.3}, C, "an invalid stream/event/handle, often a handle from another device or context"),
    401: ({"unknown": 1.0}, C, "the operation cannot run in the present state"),
    402: ({"unknown": 1.0}, C, "lossy introspection"),
    500: ({"missing-dependency-lib": 0.5, "arch-unsupported": 0.3, "unknown": 0.2}, F,
          "a named symbol/kernel was not found in the loaded module"),
    600: ({"harmless-warning": 1.0}, N, "not an error: asynchronous work not yet complete"),
    700: ({"illegal-memory-access": 1.0}, F, "a kernel accessed an illegal address"),
    701: ({"unsupported-config": 0.8, "arch-unsupported": 0.2}, F,
          "the launch needs more registers/threads than the device can provide"),
    702: ({"hardware-fault": 0.4, "unsupported-config": 0.3, "unknown": 0.3}, F,
          "the kernel ran past the display watchdog and was killed"),
    703: ({"unsupported-config": 1.0}, F, "incompatible texturing mode"),
    704: ({"harmless-warning": 1.0}, N, "peer access already enabled"),
    705: ({"unsupported-config": 1.0}, F, "peer access not enabled"),
    708: ({"unknown": 1.0}, C, "device flags set while the device is active"),
    709: ({"unknown": 1.0}, C, "the context was destroyed"),
    710: ({"illegal-memory-access": 0.6, "unknown": 0.4}, F,
          "a device-side assert fired (usually an index out of range in a kernel)"),
    711: ({"unsupported-config": 1.0}, F, "peer mapping resources exhausted"),
    712: ({"unknown": 1.0}, C, "host memory already registered"),
    713: ({"unknown": 1.0}, C, "host memory not registered"),
    714: ({"illegal-memory-access": 0.8, "hardware-fault": 0.2}, F, "hardware stack error in a kernel (stack overflow/corruption)"),
    715: ({"illegal-memory-access": 0.7, "arch-unsupported": 0.2, "hardware-fault": 0.1}, F,
          "an illegal instruction in a kernel"),
    716: ({"illegal-memory-access": 1.0}, F, "a kernel used a misaligned address"),
    717: ({"illegal-memory-access": 1.0}, F, "a kernel used an address in the wrong address space"),
    718: ({"illegal-memory-access": 0.8, "hardware-fault": 0.2}, F, "invalid program counter in a kernel"),
    719: ({"illegal-memory-access": 0.6, "hardware-fault": 0.3, "unknown": 0.1}, F,
          "unspecified launch failure: a kernel faulted (bad access) or the GPU failed"),
    720: ({"unsupported-config": 1.0}, F, "too many blocks for a cooperative launch"),
    721: ({"illegal-memory-access": 0.5, "unknown": 0.5}, F, "tensor memory not completely freed by a kernel"),
    800: ({"unknown": 0.6, "no-driver": 0.4}, F, "operation not permitted (e.g. restricted by the container or driver)"),
    801: ({"unsupported-config": 0.7, "driver-too-old": 0.3}, F, "the operation is not supported on this device/driver"),
    802: ({"no-driver": 0.6, "hardware-fault": 0.4}, F,
          "system not yet initialised (e.g. NVSwitch fabric manager not running)"),
    803: ({"driver-library-mismatch": 1.0}, F, "the display (kernel) driver and the CUDA driver library versions differ"),
    804: ({"forward-compat-unsupported": 1.0}, F,
          "forward-compatibility libraries used on a GPU that does not support them"),
    805: ({"no-driver": 0.6, "unknown": 0.4}, F, "cannot connect to the MPS daemon"),
    806: ({"no-driver": 0.5, "unknown": 0.5}, F, "MPS RPC failure"),
    807: ({"no-driver": 0.5, "unknown": 0.5}, F, "MPS server not ready"),
    808: ({"gpu-out-of-memory": 0.5, "unknown": 0.5}, F, "MPS client resources exhausted"),
    809: ({"gpu-out-of-memory": 0.5, "unknown": 0.5}, F, "MPS connection resources exhausted"),
    810: ({"unknown": 0.6, "illegal-memory-access": 0.4}, F, "the MPS server terminated the client (often after a fault in it)"),
    811: ({"unsupported-config": 1.0}, F, "dynamic parallelism unsupported in this configuration"),
    812: ({"unsupported-config": 0.5, "driver-too-old": 0.5}, F, "mixed CUDA dynamic-parallelism versions"),
    909: ({"unknown": 1.0}, C, "a wait timed out"),
    911: ({"unknown": 1.0}, C, "async error in an external entity"),
    912: ({"unsupported-config": 1.0}, F, "cluster misconfiguration in a launch"),
    913: ({"unknown": 1.0}, C, "function not loaded"),
    914: ({"unsupported-config": 1.0}, F, "invalid resource type"),
    915: ({"unsupported-config": 1.0}, F, "insufficient or non-applicable resources"),
    916: ({"hardware-fault": 0.5, "unknown": 0.5}, F, "key rotation in confidential-compute mode"),
    999: ({"no-driver": 0.4, "hardware-fault": 0.3, "unknown": 0.3}, F,
          "unknown error: most often a broken driver state (after suspend, nvidia_uvm not loaded) or a failed GPU"),
    10000: ({"unknown": 1.0}, C, "API failure base"),
}
for _code in range(900, 909):
    CAUSES.setdefault(_code, ({"unsupported-config": 0.7, "unknown": 0.3}, F,
                              "a stream-capture (CUDA graph) rule was broken"))
CAUSES.setdefault(910, ({"unsupported-config": 1.0}, F, "a CUDA graph update violated its constraints"))
_DEFAULT = ({"unknown": 1.0}, C, "an API usage error that names no environment or convolution cause")


def _load_runtime(spec: str) -> tuple[str, dict[int, tuple[str, str]]]:
    version, path = spec.split("=", 1)
    lib = ctypes.CDLL(path)
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    table: dict[int, tuple[str, str]] = {}
    for code in range(0, 12000):
        name = lib.cudaGetErrorName(code).decode()
        if name != "unrecognized error code":
            table[code] = (name, lib.cudaGetErrorString(code).decode())
    return version, table


_ENUM_ITEM = re.compile(r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*(?P<name>\w+)\s*=\s*(?P<num>0x[0-9a-fA-F]+|\d+)", re.S)


def _header_docs(path: str, start: str, end: str) -> dict[str, tuple[int, str]]:
    text = Path(path).read_text()
    body = text[text.index(start):]
    body = body[: body.index(end)]
    docs: dict[str, tuple[int, str]] = {}
    for m in _ENUM_ITEM.finditer(body):
        doc = " ".join(line.strip().lstrip("*").strip() for line in m.group("doc").splitlines())
        doc = re.sub(r"\s+", " ", doc.replace("::", "")).strip()
        docs[m.group("name")] = (int(m.group("num"), 0), doc)
    return docs


def _cause(code: int) -> dict[str, object]:
    causes, role, why = CAUSES.get(code, _DEFAULT)
    return {"causes": causes, "role": role, "rationale": why}


def build(cudarts: list[str], driver_types: str, cuda_h: str) -> dict[str, object]:
    runtimes = [_load_runtime(s) for s in cudarts]
    rt_docs = _header_docs(driver_types, "enum __device_builtin__ cudaError", "};")
    drv_docs = _header_docs(cuda_h, "typedef enum cudaError_enum", "} CUresult;")
    codes = sorted({c for _, t in runtimes for c in t})
    runtime_rows = []
    by_number: dict[int, str] = {}
    for code in codes:
        seen = {v: t[code] for v, t in runtimes if code in t}
        name, desc = next(iter(seen.values()))
        variants = sorted({d for _, d in seen.values()})
        by_number[code] = desc
        row: dict[str, object] = {"name": name, "number": code, "description": desc}
        if len(variants) > 1:
            row["description_variants"] = variants
        row["runtimes"] = sorted(seen)
        if name in LEGACY and LEGACY[name] != code:
            row["legacy_number"] = LEGACY[name]
        if name in rt_docs:
            row["doc"] = rt_docs[name][1]
        row.update(_cause(code))
        if code != 0:
            runtime_rows.append(row)
    driver_rows = []
    for name, (code, doc) in sorted(drv_docs.items(), key=lambda kv: kv[1][0]):
        if code == 0:
            continue
        row = {"name": name, "number": code}
        if code in by_number:
            row["description"] = by_number[code]
        row["doc"] = doc
        row.update(_cause(code))
        driver_rows.append(row)
    return {
        "source": {
            "runtime": [
                {"library": f"libcudart (CUDA runtime {v})", "via": "cudaGetErrorName / cudaGetErrorString"}
                for v, _ in runtimes
            ],
            "runtime_doc": {"file": "driver_types.h", "version": "CUDA 13.0 (nvidia-cuda-runtime 13.0.96)"},
            "driver_doc": {"file": "cuda.h", "version": "CUDA 13.0 (CUDA_VERSION 13000)"},
            "legacy": LEGACY_SOURCE,
            "driver_description_note": "CUresult 'description' is the runtime's cudaGetErrorString for the "
            "same code number (driver and runtime share numbers since CUDA 10.1); cuGetErrorString "
            "needs a driver and was not called.",
        },
        "runtime": runtime_rows,
        "driver": driver_rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudart", action="append", required=True, help="VERSION=path/to/libcudart.so")
    ap.add_argument("--driver-types", required=True)
    ap.add_argument("--cuda-h", required=True)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    data = build(a.cudart, a.driver_types, a.cuda_h)
    Path(a.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"{a.out}: {len(data['runtime'])} runtime, {len(data['driver'])} driver codes")


if __name__ == "__main__":
    main()
