extensions = ["gemm_benchmark"]
project = "gemm-benchmark test: reference"
