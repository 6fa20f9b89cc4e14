"""The CuPy backend: CupyRunner (runner.py) over the CUDA C kernels in kernels/.

Importing this package does not import CuPy; its modules do.
"""
