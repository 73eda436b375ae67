"""Finding libkforge_rt and declaring its C functions for ctypes.

Search order: $KFORGE_RT_LIBRARY; libkforge_rt.so beside this package (in it,
or in the folder holding it); the system's library path."""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


class RuntimeOptions(ctypes.Structure):
    _fields_ = [
        ("cache_dir", ctypes.c_char_p),
        ("model", ctypes.c_char_p),
        ("device", ctypes.c_int),
        ("backend", ctypes.c_int),
        ("lazy", ctypes.c_int),
        ("driver_path", ctypes.c_char_p),
    ]


class Arg(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Resources(ctypes.Structure):
    _fields_ = [
        ("registers", ctypes.c_int),
        ("spill_stores", ctypes.c_int),
        ("spill_loads", ctypes.c_int),
        ("stack_bytes", ctypes.c_int),
        ("shared_bytes", ctypes.c_int),
    ]


def _candidates():
    env = os.environ.get("KFORGE_RT_LIBRARY")
    if env:
        yield env
        return
    for folder in (_HERE, os.path.dirname(_HERE)):
        for name in ("libkforge_rt.so", "libkforge_rt.so.0"):
            path = os.path.join(folder, name)
            if os.path.exists(path):
                yield path
    found = ctypes.util.find_library("kforge_rt")
    yield found or "libkforge_rt.so"


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise OSError("cannot load libkforge_rt (set KFORGE_RT_LIBRARY to its path): "
                  + "; ".join(errors))


def _declare(lib):
    P = ctypes.c_void_p
    S = ctypes.c_char_p
    I = ctypes.c_int
    PP = ctypes.POINTER(ctypes.c_void_p)
    U3 = ctypes.c_uint * 3
    sigs = {
        "kf_strerror": (S, [I]),
        "kf_last_error": (S, []),
        "kf_runtime_open": (I, [ctypes.POINTER(RuntimeOptions), PP]),
        "kf_runtime_close": (None, [P]),
        "kf_runtime_error": (I, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "kf_runtime_arch": (S, [P]),
        "kf_runtime_device_arch": (S, [P]),
        "kf_runtime_backend": (I, [P]),
        "kf_runtime_model": (S, [P]),
        "kf_runtime_kernel_count": (I, [P]),
        "kf_runtime_kernel": (I, [P, I, PP]),
        "kf_kernel_find": (I, [P, S, I, PP]),
        "kf_kernel_launch": (I, [P, P, ctypes.POINTER(Arg), ctypes.c_size_t]),
        "kf_kernel_error": (I, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "kf_kernel_id": (S, [P]),
        "kf_kernel_kind": (S, [P]),
        "kf_kernel_symbol": (S, [P]),
        "kf_kernel_width": (I, [P]),
        "kf_kernel_param_count": (I, [P]),
        "kf_kernel_param": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(S),
                                ctypes.POINTER(ctypes.c_size_t)]),
        "kf_kernel_launch_config": (I, [P, ctypes.POINTER(U3), ctypes.POINTER(U3),
                                        ctypes.POINTER(ctypes.c_uint)]),
        "kf_kernel_resources": (I, [P, ctypes.POINTER(Resources)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib, path = _load()
_declare(lib)
