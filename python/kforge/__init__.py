"""kforge: load a model's precompiled kernels from a kforge cache and launch
them (a ctypes binding of libkforge_rt; no compiled extension).

    rt = kforge.Runtime(cache, model, device=0, backend=None, lazy=False)
    k = rt.kernel(kind, rows)      # smallest width >= rows
    k(*args, stream=None)          # all parameters but the trailing rows

kforge.Error carries the runtime's reason and .status; kforge.NoKernelError
(a subclass) means rows exceed the largest width: use the fallback path."""
from ._lib import path as library_path
from .runtime import Buffer, Error, Kernel, LayerType, NoKernelError, Runtime, Status
from .check import Difference, layer_phases

__all__ = [
    "Buffer", "Difference", "Error", "Kernel", "LayerType", "NoKernelError", "Runtime", "Status",
    "layer_phases", "library_path"
]
__version__ = "0.1.0"
