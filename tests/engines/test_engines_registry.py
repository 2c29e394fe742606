"""The engine registry (`convdoctor.engines.registry`): every candidate key belongs to exactly one
engine, and what each engine states about its keys."""

from __future__ import annotations

from convdoctor.engines import registry


def test_every_key_belongs_to_exactly_one_engine() -> None:
    """Candidate keys are defined once, by their engines (`engines.registry`)."""
    keys = {"triton:dw_c1p256w4": "triton-dw", "triton:wg_m32n64l64w4s3r": "triton-wg",
            "triton:sc_k8p256w4s": "triton-sc", "triton:fp_k64p32j32w4s4": "triton-fp",
            "cudnn:eng0": "cudnn", "cudnn-dual:eng71_k28=1": "cudnn-dual", "torch:gemm": "gemm",
            "torch:im2col": "im2col", "torch:heuristic": "torch", "torch:benchmark": "torch",
            "torch:cudnn-off": "torch-native", "cpu:mkldnn-on+nhwc": "cpu"}
    for key, name in keys.items():
        owners = [e.name for e in registry.ENGINES if e.owns(key)]
        assert owners == [name], key
    assert registry.engine_of("evil:engine") is None and not registry.known("evil:engine")
    assert registry.known("twin:cudnn:eng0")
    for k in ("triton:dw_c1p256w4", "cudnn:eng0", "cudnn-dual:eng71_k28=1", "torch:gemm",
              "torch:im2col"):
        assert not registry.engine_of(k).runs_transposed, k
    assert registry.engine_of("torch:heuristic").runs_transposed
    assert not registry.routed("torch:benchmark") and registry.routed("torch:heuristic")
    assert registry.built_by_name("triton:fp_k64p32j32w4s4") and registry.built_by_name(
        "cudnn:eng0") and not registry.built_by_name("torch:gemm")
    assert [e.name for e in registry.listed_by("cpu")] == ["cpu"]
    assert "cpu" not in [e.name for e in registry.listed_by("cuda")]
