extensions = ["myst_parser", "gemm_benchmark"]
project = "gemm-benchmark test: myst"
