extensions = ["gemm_benchmark"]
project = "gemm-benchmark test: corrupt cache files"
gemm_benchmark_execution_mode = "cache"
