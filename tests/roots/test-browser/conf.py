extensions = ["gemm_benchmark"]
project = "gemm-benchmark test: browser"
html_theme = "furo"
