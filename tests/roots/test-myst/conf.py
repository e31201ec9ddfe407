extensions = ["myst_parser", "sphinxext.gemm_benchmark"]
project = "gemm-benchmark test: myst"
