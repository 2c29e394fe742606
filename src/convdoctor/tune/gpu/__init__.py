"""The tuner's GPU backend: cuDNN engine configurations through cudnn-frontend, PyTorch's own
convolution paths, GPU timing (L2 flush, CUDA events, batched launches / CUDA graph replay), NVML
clock watching and the roofline.

Nothing here imports torch or cudnn at import time: `convdoctor --help` must stay fast and the
package must import on machines without either. Modules:

- `policy`: pure logic (note filtering, plan-name parsing, candidate dedupe, tolerances, layouts).
- `cudnn_plan`: `ConvPlan`, an executable cudnn-frontend plan for one problem, and plan enumeration.
- `timing`: `L2Flusher`, `time_launches` (events, batching, CUDA graph replay).
- `nvml`: `NvmlClock` (SM clock, clock-event reasons, slowdown flag; never raises).
- `roofline`: measured device peaks and % of roofline.
- `backend`: `CudaBackend`, the tuning backend (Backend protocol of `convdoctor.tune.backend`).
"""
