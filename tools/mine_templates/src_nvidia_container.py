"""NVIDIA container stack templates (nvidia-container-toolkit; libnvidia-container CLI)."""

from __future__ import annotations

from tpl import Source
from tpl import Template as T

H = "d34b3046758cb1a5db606b2a39519c731bbf9f56"
SRC = Source(framework="nvidia-container", repo="NVIDIA/nvidia-container-toolkit", version=f"{H} (v1.20.0-27)",
             url="https://github.com/NVIDIA/nvidia-container-toolkit",
             note="'unknown device' from NVIDIA/libnvidia-container src/cli/common.c@2e347c19")

TEMPLATES = [
    T("nct.nvml.init_failed", "failed to initialize nvml: %v", ["ERROR_LIBRARY_NOT_FOUND"],
      "internal/info/additional_info.go", line=53, version=H, groups={0: "nvml_status"},
      cond="nvml.Init() != SUCCESS while probing the host",
      causes={"no-driver": 0.6, "driver-library-mismatch": 0.4},
      why="NVML fails without a loaded driver or when kernel module and libraries differ"),
    T("nct.devices.none", "no NVIDIA devices found", [], "internal/info/proc/devices/devices.go", line=116,
      version=H, cond="/proc/devices lists no nvidia character devices", causes={"no-driver": 1.0},
      why="the kernel driver is not loaded on the host"),
    T("nct.cuda.init_failed", "failed to initialize CUDA: result=%v", ["CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"],
      "internal/cuda/cuda.go", line=105, version=H, groups={0: "cuda_status"}, cond="cuInit() != CUDA_SUCCESS",
      causes={"no-driver": 0.5, "forward-compat-unsupported": 0.2, "driver-too-old": 0.15,
              "driver-library-mismatch": 0.15}, why="the CUresult (captured) decides"),
    T("nct.nvml.driver_version", "failed to get driver version: %v", ["ERROR_UNINITIALIZED"], "pkg/nvcdi/lib.go",
      line=135, version=H, cond="nvml SystemGetDriverVersion failed",
      causes={"no-driver": 0.5, "driver-library-mismatch": 0.5}, why="NVML cannot read the driver"),
    T("nct.nvml.not_initialized", "nvml library not initialized", [], "pkg/nvcdi/lib.go", line=122, version=H,
      cond="CDI generation without an initialised NVML", causes={"no-driver": 0.7, "driver-library-mismatch": 0.3},
      why="NVML could not start"),
    T("nct.compat.not_found", "Failed to find CUDA compat library: %w", ["no such file or directory"],
      "cmd/nvidia-cdi-hook/cudacompat/cudacompat.go", line=158, version=H, role="noise",
      cond="the container has no cuda-compat library", causes={"harmless-warning": 0.8, "forward-compat-unsupported": 0.2},
      why="no forward-compatibility libraries: the host driver is used"),
    T("nct.compat.unexpected", "Unexpected number of CUDA compat libraries in container: %v",
      ["[/usr/local/cuda/compat/libcuda.so.535.1 /usr/local/cuda/compat/libcuda.so.550.2]"],
      "cmd/nvidia-cdi-hook/cudacompat/cudacompat.go", line=168, version=H, role="context",
      cond="more than one cuda-compat libcuda in the container",
      causes={"forward-compat-unsupported": 0.6, "driver-library-mismatch": 0.4},
      why="conflicting forward-compatibility libraries in the image"),
    T("nct.cli.unknown_device", "unknown device", [], "src/cli/common.c",
      version="2e347c194079961526befcfb9d77d4aed7410afc", repo="NVIDIA/libnvidia-container",
      cond="select_devices: an NVIDIA_VISIBLE_DEVICES / --gpus entry matched no GPU UUID, PCI id, index or MIG device",
      causes={"no-driver": 0.8, "unknown": 0.2}, why="the requested GPU is not present on this host"),
]
