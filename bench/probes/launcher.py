"""The probes' launcher: compiles a probe's CUDA source with nvcc for the GPU
at hand, loads it and launches it through the CUDA driver API (ctypes).

For experiments only (bench/probes): a probe is no kforge kernel, and
nothing here stands for the kforge runtime, which the tests and benchmarks
use. The driver calls and the timing are tests/gpu/kf_timing.py's (the read
probe of scripts/bench-kernels uses them too): `timing` is that module.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"))
import kf_timing as timing  # noqa: E402

Error = timing.Error
check = timing.check
driver = timing.driver
launch = timing.launch
LaunchAttr = timing.LaunchAttr
LaunchConfig = timing.LaunchConfig
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = timing.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def load_probe(src, names, max_shared=0):
    """Compiles a probe's CUDA source for this GPU and loads it: (module,
    {name: function}), each function allowed max_shared bytes of dynamic
    shared memory. Keep the module while launching."""
    return timing.load_module(timing.compile_cubin(src), names, max_shared)


def device_attr(attr):
    """A CUdevice_attribute of torch's current device."""
    import torch
    dev, v = ctypes.c_int(), ctypes.c_int()
    check(driver().cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
    check(driver().cuDeviceGetAttribute(ctypes.byref(v), attr, dev), f"device attribute {attr}")
    return v.value


def capped_shared(fn, shared, max_blocks):
    """The kforge runtime's rule for launch.max_blocks_per_sm (rt_cuda.c),
    restated for a probe: enough dynamic shared memory that one block more
    than max_blocks would not fit on an SM."""
    sm, optin, reserved = device_attr(81), device_attr(97), device_attr(111)
    v = ctypes.c_int()
    check(driver().cuFuncGetAttribute(ctypes.byref(v), 1, fn), "static shared memory")
    need = sm // (max_blocks + 1) + 1 - v.value - reserved
    return need if shared < need and v.value + need <= optin else shared
