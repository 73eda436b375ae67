"""Finding libkforge_rt and declaring its C functions for ctypes.

Search order, the first that loads wins:
  1. $KFORGE_RT_LIBRARY (only it, when set);
  2. a copy bundled in this package (copied into python/kforge/ before
     `pip install`), or beside the package;
  3. the library `cmake --install` put in the prefix this package was
     installed into: <prefix>/lib/pythonX.Y/site-packages/kforge ->
     <prefix>/lib, which holds for a virtual environment used as the prefix
     and for /usr/local;
  4. the system's loader (ld.so.conf, LD_LIBRARY_PATH).
`path` is the file that was loaded, read back from the process's mappings."""
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
        ("lax_permissions", ctypes.c_int),
    ]


class Arg(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Variant(ctypes.Structure):
    """kf_variant of runtime.h."""
    _fields_ = [("page_size", ctypes.c_int)]


class Buffer(ctypes.Structure):
    """kf_buffer of runtime.h."""
    _fields_ = [("arg", ctypes.c_char_p), ("param", ctypes.c_int), ("bytes", ctypes.c_size_t),
                ("zero_once", ctypes.c_int)]


class Resources(ctypes.Structure):
    _fields_ = [
        ("registers", ctypes.c_int),
        ("spill_stores", ctypes.c_int),
        ("spill_loads", ctypes.c_int),
        ("stack_bytes", ctypes.c_int),
        ("shared_bytes", ctypes.c_int),
    ]


_NAMES = ("libkforge_rt.so", "libkforge_rt.so.0")


def _candidates():
    env = os.environ.get("KFORGE_RT_LIBRARY")
    if env:
        yield env
        return
    site = os.path.dirname(_HERE)
    # site-packages -> pythonX.Y -> lib: the prefix's library directory
    prefix_lib = os.path.dirname(os.path.dirname(site))
    for folder in (_HERE, site, prefix_lib):
        for name in _NAMES:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                yield path
    found = ctypes.util.find_library("kforge_rt")
    if found:
        yield found
    yield from _NAMES


def _mapped_path():
    """The file the loader mapped for a library loaded by name, else None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(
                        "libkforge_rt.so"):
                    return parts[5].strip()
    except OSError:
        pass
    return None


def _load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        return lib, _mapped_path() or path
    raise OSError("cannot load libkforge_rt (install it with `cmake --install` into this "
                  "package's prefix, or set KFORGE_RT_LIBRARY to its path): "
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
        "kf_runtime_page_sizes": (I, [P, ctypes.POINTER(I), I]),
        "kf_runtime_layer_type_count": (I, [P]),
        "kf_runtime_layer_type": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(I),
                                      ctypes.POINTER(ctypes.POINTER(S)), ctypes.POINTER(I)]),
        "kf_runtime_layer_type_layer": (I, [P, I, ctypes.POINTER(S)]),
        "kf_runtime_kernel": (I, [P, I, PP]),
        "kf_kernel_find": (I, [P, S, I, PP]),
        "kf_kernel_find_ex": (I, [P, S, I, ctypes.POINTER(Variant), PP]),
        "kf_kernel_launch": (I, [P, P, ctypes.POINTER(Arg), ctypes.c_size_t]),
        "kf_kernel_error": (I, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "kf_kernel_id": (S, [P]),
        "kf_kernel_kind": (S, [P]),
        "kf_kernel_symbol": (S, [P]),
        "kf_kernel_width": (I, [P]),
        "kf_kernel_page_size": (I, [P]),
        "kf_kernel_param_count": (I, [P]),
        "kf_kernel_param": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(S),
                                ctypes.POINTER(ctypes.c_size_t)]),
        "kf_kernel_launch_config": (I, [P, ctypes.POINTER(U3), ctypes.POINTER(U3),
                                        ctypes.POINTER(ctypes.c_uint)]),
        "kf_kernel_resources": (I, [P, ctypes.POINTER(Resources)]),
        "kf_kernel_buffer_count": (I, [P]),
        "kf_kernel_buffer": (I, [P, I, ctypes.POINTER(Buffer)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib, path = _load()
_declare(lib)
