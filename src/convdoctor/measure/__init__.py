"""Measurement parts shared by the tuner, the bench and the runtime: GPU timing (L2 flush, CUDA
events, graph-batched launches), NVML clock watching, buffer placements, the cuDNN workspace guard,
the roofline, end-to-end step timing, stopping rules and correctness against float64.

Nothing here imports torch or NVML at import time.
"""
