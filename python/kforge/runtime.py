"""Runtime and Kernel: the Python face of libkforge_rt.

A Kernel is called with every manifest parameter except the trailing
`int rows`, which the binding appends (the rows given to Runtime.kernel).
Arguments are checked against the manifest's parameter list before anything
reaches the driver; the C library checks count and sizes again."""
import ctypes
import enum
import operator
import sys
import typing
import weakref

from . import _lib

lib = _lib.lib


class Status(enum.IntEnum):
    """kf_status of runtime.h."""
    OK = 0
    INVALID_ARGUMENT = 1
    NO_MEMORY = 2
    NO_DRIVER = 3
    DRIVER = 4
    NO_DEVICE = 5
    NO_MANIFEST = 6
    BAD_MANIFEST = 7
    FORMAT = 8
    IO = 9
    CHECKSUM = 10
    SYMBOL = 11
    NO_KIND = 12
    NO_WIDTH = 13
    ARGS = 14
    BAD_META = 15
    CORESIDENCY = 16
    UNTRUSTED = 17
    NO_PAGE_SIZE = 18


class Error(Exception):
    """A runtime failure: .status (a Status) and .reason (its one line)."""

    def __init__(self, status, reason):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.reason = reason
        super().__init__(reason)


class NoKernelError(Error):
    """rows exceed the largest width of the kind: use the fallback path."""


def _error(status, reason):
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    if not reason:
        reason = lib.kf_strerror(status).decode()
    cls = NoKernelError if status == Status.NO_WIDTH else Error
    return cls(status, reason)


def _last_error(status):
    return _error(status, lib.kf_last_error())


_BACKENDS = {None: 0, "auto": 0, "cuda": 1, "hip": 2}
_BACKEND_NAMES = {0: "auto", 1: "cuda", 2: "hip"}
_DTYPES = {  # pointee of a pointer parameter -> torch dtype name
    "kf_bf16": "torch.bfloat16",
    "float": "torch.float32",
    "int": "torch.int32",
}


class Runtime:
    """One opened (cache, model, device). Raises Error with the runtime's
    reason when it cannot serve: no manifest for the device's arch, a
    damaged object, a missing symbol, a newer manifest format, a cache file
    others could have changed (Status.UNTRUSTED: docs/contracts.md, "Trust";
    lax_permissions=True opts out of the owner and mode checks, as
    KFORGE_LAX_PERMISSIONS=1 does).

    page_sizes: the KV-cache page sizes its kernels were built for, the one
    served when kernel() is given none first; empty when no kernel takes a
    page size."""

    def __init__(self, cache, model, device=0, backend=None, lazy=False,
                 driver_path=None, lax_permissions=False):
        if backend not in _BACKENDS:
            raise Error(Status.INVALID_ARGUMENT,
                        f"backend must be None, 'auto', 'cuda' or 'hip', got {backend!r}")
        self._h = None
        # Weak: a kernel holds its runtime, so a strong cache would make a
        # cycle, and the runtime would be unloaded whenever Python's cyclic
        # garbage collector ran, e.g. in the middle of another runtime's
        # CUDA-graph capture, which an unload invalidates. Without the cycle
        # it is unloaded when its last reference (or kernel) goes.
        self._kernels = weakref.WeakValueDictionary()
        opts = _lib.RuntimeOptions(
            cache_dir=str(cache).encode(), model=str(model).encode(),
            device=int(device), backend=_BACKENDS[backend], lazy=1 if lazy else 0,
            driver_path=driver_path.encode() if driver_path else None,
            lax_permissions=1 if lax_permissions else 0)
        h = ctypes.c_void_p()
        st = lib.kf_runtime_open(ctypes.byref(opts), ctypes.byref(h))
        if st != 0:
            raise _last_error(st)
        self._h = h.value
        self.device = int(device)
        self.lazy = bool(lazy)
        self.arch = lib.kf_runtime_arch(self._h).decode()
        self.device_arch = lib.kf_runtime_device_arch(self._h).decode()
        self.model = lib.kf_runtime_model(self._h).decode()
        self.backend = _BACKEND_NAMES[lib.kf_runtime_backend(self._h)]
        self.layer_types = self._layer_types()
        n = lib.kf_runtime_page_sizes(self._h, None, 0)
        sizes = (ctypes.c_int * max(n, 1))()
        lib.kf_runtime_page_sizes(self._h, sizes, n)
        self.page_sizes = tuple(sizes[:n])

    def _layer_types(self):
        out = []
        for i in range(lib.kf_runtime_layer_type_count(self._h)):
            name, count = ctypes.c_char_p(), ctypes.c_int()
            kinds, nkinds = ctypes.POINTER(ctypes.c_char_p)(), ctypes.c_int()
            st = lib.kf_runtime_layer_type(self._h, i, ctypes.byref(name), ctypes.byref(count),
                                           ctypes.byref(kinds), ctypes.byref(nkinds))
            if st != 0:
                raise _last_error(st)
            layer = ctypes.c_char_p()
            st = lib.kf_runtime_layer_type_layer(self._h, i, ctypes.byref(layer))
            if st != 0:
                raise _last_error(st)
            out.append(LayerType(name.value.decode(), count.value,
                                 tuple(kinds[k].decode() for k in range(nkinds.value)),
                                 layer.value.decode() if layer.value else None))
        return out

    def layer_kinds(self, layer):
        """The kinds layer `layer` (0-based) runs, in order, by the manifest's
        layer types; None when the model's layers all run the same kinds
        (layer_types is empty). IndexError past the last layer."""
        layer = operator.index(layer)
        if not self.layer_types:
            return None
        first = 0
        for t in self.layer_types:
            if 0 <= layer < first + t.count:
                return t.kinds
            first += t.count
        raise IndexError(f"layer {layer}: the layer types cover layers 0..{first - 1}")

    def _handle(self):
        if self._h is None:
            raise Error(Status.INVALID_ARGUMENT, "the runtime is closed")
        return self._h

    def kernels(self):
        """Every kernel id of the manifest, in manifest order."""
        h = self._handle()
        out = []
        for i in range(lib.kf_runtime_kernel_count(h)):
            k = ctypes.c_void_p()
            st = lib.kf_runtime_kernel(h, i, ctypes.byref(k))
            if st != 0:
                raise _last_error(st)
            out.append(lib.kf_kernel_id(k).decode())
        return out

    def kernel(self, kind, rows, page_size=None):
        """The kernel of `kind` for `rows` rows (smallest width >= rows).
        NoKernelError when rows exceed the largest width. page_size: the
        tokens per page of the caller's KV cache: kinds that take one
        (attention, the KV write, layer kernels) serve the page sizes they
        were built for (page_sizes) and raise Error with status NO_PAGE_SIZE
        for another; None: the model's first (default) page size."""
        rows = operator.index(rows)
        page = 0 if page_size is None else operator.index(page_size)
        if page < 0:
            raise ValueError(f"page_size must be positive, got {page}")
        key = (kind, rows, page)
        k = self._kernels.get(key)
        if k is None:
            h = ctypes.c_void_p()
            v = _lib.Variant(page)
            st = lib.kf_kernel_find_ex(self._handle(), str(kind).encode(), rows,
                                       ctypes.byref(v), ctypes.byref(h))
            if st != 0:
                raise _last_error(st)
            k = self._kernels[key] = Kernel(self, h.value, rows)
        return k

    def check_layer(self, rows, args, kind="layer", page_size=None, stream=None, chain=None):
        """Check mode: runs one step through the layer kernel of `kind` and
        through the chain of its phase kinds on copies of the same inputs
        and returns the first kforge.Difference (phase kind, parameter, row,
        index, both values), or None when all outputs are bitwise equal;
        args are the layer kernel's arguments by name (kforge/check.py)."""
        from .check import check_layer
        return check_layer(self, rows, args, kind, page_size, stream, chain)

    def close(self):
        """Unloads everything; kernels of this runtime must not be used after.
        Unloading is one of the calls that CUDA refuses while a stream
        capture is under way (in torch's default global mode, a capture on
        any thread), and the capture then fails: close or drop a runtime
        outside CUDA-graph captures. (Dropping the last reference to a
        runtime and its kernels closes it there and then.)"""
        if self._h is not None:
            self._kernels.clear()
            lib.kf_runtime_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return (f"kforge.Runtime(model={self.model!r}, arch={self.arch!r}, "
                f"device={self.device}, backend={self.backend!r})")


class LayerType(typing.NamedTuple):
    """Runtime.layer_types: `count` consecutive layers (after those of the
    types before) that run `kinds`, in order. A model whose layers differ
    (GLM-4.5: dense first layers, then mixtures of experts) has several.
    `layer` is the layer kind that runs those kinds in one launch, or None
    when the build has none for this arch."""
    name: str
    count: int
    kinds: tuple
    layer: typing.Optional[str] = None


class Buffer(typing.NamedTuple):
    """A buffer a kernel takes besides its operands (Kernel.buffers): pass a
    device allocation of `bytes` bytes as parameter `arg` (index `param`).
    zero_once: zero it once after allocating it; every launch leaves it as
    the next needs it (launches sharing it must not overlap). Otherwise its
    contents do not matter."""
    arg: str
    param: int
    bytes: int
    zero_once: bool


class Kernel:
    """A callable kernel: k(*args, stream=None) launches with the manifest's
    grid, block and shared memory, args being every parameter but the
    trailing rows. Pointers take torch tensors (checked for dtype, device and
    contiguity), objects with __cuda_array_interface__, or ints."""

    def __init__(self, runtime, handle, rows):
        self._rt = runtime
        self._h = handle
        self.rows = rows
        self.id = lib.kf_kernel_id(handle).decode()
        self.kind = lib.kf_kernel_kind(handle).decode()
        self.symbol = lib.kf_kernel_symbol(handle).decode()
        self.width = lib.kf_kernel_width(handle)
        # the KV-cache page size it was built for; None: it takes none
        self.page_size = lib.kf_kernel_page_size(handle) or None
        params, sizes = [], []
        for i in range(lib.kf_kernel_param_count(handle)):
            name, typ, size = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_size_t()
            st = lib.kf_kernel_param(handle, i, ctypes.byref(name), ctypes.byref(typ),
                                     ctypes.byref(size))
            if st != 0:
                raise _last_error(st)
            params.append((name.value.decode(), typ.value.decode()))
            sizes.append(size.value)
        self.params = params
        self._sizes = sizes
        self._appends_rows = bool(params) and params[-1] == ("rows", "int")
        self._call_params = params[:-1] if self._appends_rows else params
        self._resources = None
        buffers = []
        for i in range(lib.kf_kernel_buffer_count(handle)):
            b = _lib.Buffer()
            st = lib.kf_kernel_buffer(handle, i, ctypes.byref(b))
            if st != 0:
                raise _last_error(st)
            buffers.append(Buffer(b.arg.decode(), b.param, b.bytes, bool(b.zero_once)))
        self.buffers = tuple(buffers)

    @property
    def resources(self):
        """registers, spill_stores, spill_loads, stack_bytes, shared_bytes
        from the kernel's meta.json."""
        if self._resources is None:
            r = _lib.Resources()
            st = lib.kf_kernel_resources(self._h, ctypes.byref(r))
            if st != 0:
                raise _last_error(st)
            self._resources = {f: getattr(r, f) for f, _ in _lib.Resources._fields_}
        return dict(self._resources)

    @property
    def launch_config(self):
        grid, block = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)()
        shared = ctypes.c_uint()
        lib.kf_kernel_launch_config(self._h, ctypes.byref(grid), ctypes.byref(block),
                                    ctypes.byref(shared))
        return {"grid": list(grid), "block": list(block), "shared_bytes": shared.value}

    def _bad(self, i, msg):
        name, typ = self.params[i]
        return Error(Status.ARGS, f"kernel {self.id}: argument {i} ({typ} {name}) {msg}; "
                                  f"not launched")

    def _pointer(self, i, typ, value):
        if hasattr(value, "data_ptr"):  # a torch tensor
            pointee = typ.replace("const ", "").rstrip("*").strip()
            want = _DTYPES.get(pointee)
            if want and str(getattr(value, "dtype", "")) != want:
                raise self._bad(i, f"is a tensor of {value.dtype}, expected {want}")
            if not getattr(value, "is_cuda", False):
                raise self._bad(i, f"is a tensor on {getattr(value, 'device', '?')}, "
                                   f"not on the GPU")
            index = getattr(getattr(value, "device", None), "index", None)
            if index is not None and index != self._rt.device:
                raise self._bad(i, f"is on device {index}, the runtime's is {self._rt.device}")
            if hasattr(value, "is_contiguous") and not value.is_contiguous():
                raise self._bad(i, "is not contiguous")
            return value.data_ptr()
        cai = getattr(value, "__cuda_array_interface__", None)
        if cai is not None:
            return cai["data"][0]
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = operator.index(value)
            except TypeError:
                raise self._bad(i, f"is {type(value).__name__}, expected a tensor or an "
                                   f"int address") from None
        if value <= 0 or value >= 1 << 64:
            raise self._bad(i, f"is address {value}, expected a device pointer")
        return value

    def _convert(self, i, typ, value):
        if typ.endswith("*"):
            return ctypes.c_void_p(self._pointer(i, typ, value))
        if typ == "float":
            if isinstance(value, (bool, str, bytes)):
                raise self._bad(i, f"is {type(value).__name__}, expected a float")
            try:
                return ctypes.c_float(float(value))
            except (TypeError, ValueError):
                raise self._bad(i, f"is {type(value).__name__}, expected a float") from None
        try:
            if isinstance(value, (bool, float)):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise self._bad(i, f"is {type(value).__name__}, expected an int") from None
        bits = 32 if typ == "int" else 64
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise self._bad(i, f"is {value}, out of range for {typ}")
        return ctypes.c_int32(value) if bits == 32 else ctypes.c_int64(value)

    def _stream(self, stream):
        if stream is None:
            torch = sys.modules.get("torch")
            if torch is not None and self._rt.backend in ("cuda", "hip"):
                try:
                    return torch.cuda.current_stream(self._rt.device).cuda_stream
                except Exception:  # torch without a GPU build: default stream
                    return 0
            return 0
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        raise Error(Status.INVALID_ARGUMENT,
                    f"kernel {self.id}: stream must be an int, a torch stream or None, "
                    f"got {type(stream).__name__}")

    def __call__(self, *args, stream=None):
        n = len(self._call_params)
        if len(args) != n:
            names = ", ".join(f"{t} {p}" for p, t in self._call_params)
            tail = " (rows is appended)" if self._appends_rows else ""
            raise Error(Status.ARGS, f"kernel {self.id}: takes {n} arguments ({names}){tail}, "
                                     f"got {len(args)}; not launched")
        values = [self._convert(i, t, v) for i, ((_, t), v) in
                  enumerate(zip(self._call_params, args))]
        if self._appends_rows:
            values.append(ctypes.c_int32(self.rows))
        argv = (_lib.Arg * max(len(values), 1))()
        for i, v in enumerate(values):
            argv[i].value = ctypes.addressof(v)
            argv[i].size = ctypes.sizeof(v)
        st = lib.kf_kernel_launch(self._h, ctypes.c_void_p(self._stream(stream)), argv,
                                  len(values))
        if st != 0:
            raise _last_error(st)

    def __repr__(self):
        return f"kforge.Kernel({self.id!r}, rows={self.rows})"
