"""Convolution kernels of convdoctor's own, offered as tuning candidates beside cuDNN's engines.

- `depthwise`: depthwise convolutions (groups == C == K, 1D/2D) as one direct Triton kernel,
  forward and data gradient, any memory layout.

Each kernel module imports Triton lazily: without Triton (CPU builds, or a torch build that does
not ship it) the candidates are simply not offered.
"""
