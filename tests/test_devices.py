

def test_a_selector_labels_its_tab_as_the_measured_gpu_is_labelled() -> None:
    """Session 19: the EP 8 section's H100 tab read "H100-80GB-HBM3" beside the EP 1 section's "H100 80GB HBM3",
    so the two did not switch together."""
    from gemm_bench.question.devices import device_label, selector_label

    assert selector_label("h100") == device_label("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"
    assert selector_label("h200") == device_label("NVIDIA H200") == "H200"
    assert selector_label("h100-80gb-hbm3") == "H100 80GB HBM3"
