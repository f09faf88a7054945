"""Triton kernels, each beside a plain-torch reference.

Never imports ``sglang_lite``. Importing a module here does not need triton: without it the
``*_ref`` functions still work and the Triton launchers raise a clear error.
"""
