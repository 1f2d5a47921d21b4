"""The speed estimate's calibration (:func:`kvplan.perf.estimate_efficiency`). Written by
``scripts/calibrate_speed.py`` from tests/fixtures/throughput_measurements.yaml; do not edit by hand.
"""

CALIBRATION = {
    "measurements": 0,
    "median_abs_error": None,
    "engines": {
        "*": {"mbu": 0.7, "mfu": 0.5, "link": 1.0, "layer_us": 0.0, "moe_layer_us": 0.0, "collective_us": 0.0,
              "step_us": 0.0},
    },
    "gpu_classes": {"*": 1.0},
}
