"""Without a GPU, the Triton kernels run under Triton's CPU interpreter. Triton reads the switch
when it decorates its own library functions at import, so it is set here, before any test module
imports Triton; with a GPU it stays off (the `gpu` tests elsewhere run the compiled kernels)."""

from __future__ import annotations

import os


def _gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


if not _gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")
