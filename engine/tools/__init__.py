"""Developer tools for the backends, run by hand (`python -m engine.tools.<name>`), never by
the harness: `devcheck` (decode and prefill timings, kernel profiles and ablations on the GPU),
`gemvbench` (mat-vec kernel variants alone), `emulation` (the CUDA backend's float16 roundings
on the NumPy runner, on the CPU). The backends import nothing from here.
"""
