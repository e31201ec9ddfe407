extensions = ["gemm_benchmark"]
project = "gemm-benchmark test: parallel roles"
gemm_benchmark_execution_mode = "cache"
