extensions = ["gemm_benchmark"]
project = "gemm-benchmark test: escaping"
gemm_benchmark_execution_mode = "cache"
# A config string with markup, quotes and a backslash: the "not measured" note names this directory.
gemm_benchmark_cache_dir = "_cache <script>alert('dir') \"q\" \\ b"  # one directory: no '/'
# Sphinx would turn "q" into typographic quotes; the tests compare text literally.
smartquotes = False
