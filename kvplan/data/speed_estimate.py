"""The speed estimate's calibration (:func:`kvplan.perf.estimate_efficiency`). Written by
``scripts/calibrate_speed.py`` from tests/fixtures/throughput_measurements.yaml; do not edit by hand.
"""

CALIBRATION = {
    "measurements": 66,
    "median_abs_error": 0.1357,
    "loo_median_abs_error": 0.1766,
    "engines": {
        "vllm": {
            "mbu": 0.5117, "mfu": 0.2831, "layer_us": 20.04, "moe_layer_us": 391.6, "collective_us": 9.565,
            "link": 1.0, "step_us": 0.0,
        },
        "sglang": {
            "mbu": 0.398, "mfu": 0.4924, "layer_us": 20.13, "moe_layer_us": 416.5, "collective_us": 11.29,
            "link": 1.0, "step_us": 0.0,
        },
        "trtllm": {
            "mbu": 0.5685, "mfu": 0.4944, "layer_us": 20.28, "moe_layer_us": 197.0, "collective_us": 133.2,
            "link": 1.0, "step_us": 0.0,
        },
        "llamacpp": {
            "mbu": 0.5424, "mfu": 0.5, "layer_us": 20.31, "moe_layer_us": 27.18, "collective_us": 10.0,
            "link": 1.0, "step_us": 0.0,
        },
        "gpt-fast": {
            "mbu": 0.7285, "mfu": 0.5, "layer_us": 20.38, "moe_layer_us": 25.53, "collective_us": 17.58,
            "link": 1.0, "step_us": 0.0,
        },
        "*": {
            "mbu": 0.5424, "mfu": 0.4944, "layer_us": 20.28, "moe_layer_us": 197.0, "collective_us": 11.29,
            "link": 1.0, "step_us": 0.0,
        },
    },
    "gpu_classes": {
        "nvidia-hopper": {"efficiency": 1.0, "fixed": 1.0},
        "amd": {"efficiency": 0.6776, "fixed": 1.129},
        "nvidia-ampere": {"efficiency": 1.187, "fixed": 1.309},
        "nvidia-ada": {"efficiency": 1.418, "fixed": 0.6267},
        "nvidia-blackwell": {"efficiency": 1.379, "fixed": 0.2605},
        "*": {"efficiency": 1.0, "fixed": 1.0},
    },
}
