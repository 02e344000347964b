"""Operators that run the user's Python code: ``python_function``, ``torch_python_function``,
``dl_tensor_python_function``."""
