"""Check mode for layer kernels: one decoder layer through its layer kernel
(one launch) and through the chain of the kinds it runs as phases, on copies
of the same inputs, compared bit for bit (Runtime.check_layer).

A layer kernel's parameters are its phases' parameters named
"<kind>_<parameter>" (docs/contracts.md, "Layer kinds"), plus its own
buffers (layer_sync, layer_scratch) and rows. The chain runs each phase kind
with the arguments the caller gave under those names."""
import collections
import sys

from .runtime import Error, Status

Difference = collections.namedtuple("Difference", "kind arg row index layer chain")
Difference.__doc__ = """The first element where the layer kernel and the chain
differ: the phase kind that writes it and its parameter, the row (the first
index; None for a one-dimensional argument), the index in the argument's
shape, and the layer kernel's and the chain's values."""


def layer_phases(layer_params, kind_params):
    """The phases of a layer kernel, in order: [(kind, {phase parameter:
    layer parameter})], from its parameter names and the parameters of the
    model's kinds (kind_params: {kind: [names]}). A layer parameter that is
    no kind's parameter is the layer's own (its sync area and scratch)."""
    phases = collections.OrderedDict()
    for name in layer_params:
        if name == "rows":
            continue
        best = None  # the longest kind "K" with name == "K_<a parameter of K>"
        for kind, params in kind_params.items():
            if name.startswith(kind + "_") and name[len(kind) + 1:] in params:
                if best is None or len(kind) > len(best):
                    best = kind
        if best is not None:
            phases.setdefault(best, {})[name[len(best) + 1:]] = name
    return list(phases.items())


def _extent(t):
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _index(shape, flat):
    index = []
    for n in reversed(shape):
        index.append(flat % n)
        flat //= n
    return tuple(reversed(index))


def _first_difference(torch, a, b):
    """(index, a value, b value) of the first element whose bits differ."""
    ab, bb = a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    ne = (ab != bb).nonzero()
    if ne.numel() == 0:
        return None
    flat = ne[0].item() // a.element_size()
    return _index(tuple(a.shape), flat), a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()


def check_layer(rt, rows, args, kind="layer", page_size=None, stream=None, chain=None):
    """Runs one step of `rows` rows through the layer kernel of `kind` and
    through the chain of its phase kinds, and returns the first Difference,
    or None when every output is bitwise equal.

    args: the layer kernel's arguments by name (every parameter but rows),
    torch tensors for its pointers. The tensors it writes (every non-const
    pointer: outputs, the residual, the KV cache, buffers) are copied first;
    the chain runs on the copies, then the layer kernel on the originals, so
    the caller's tensors end as the layer kernel leaves them. A tensor given
    for several parameters is one tensor to both runs; a written tensor that
    partly overlaps another argument is refused. The layer's and its phases'
    buffers (Kernel.buffers) are not compared. chain: {kind: fn(named args,
    stream)} runs a phase of the chain with the caller's own code instead of
    the kind's kernel (a server that replaced that phase). Both runs go on
    `stream` (default: torch's current stream), which is synchronised."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise Error(Status.INVALID_ARGUMENT, "check_layer needs torch (import torch first)")
    chain = dict(chain or {})
    lk = rt.kernel(kind, rows, page_size=page_size)
    names = [n for n, _ in lk._call_params]
    missing = [n for n in names if n not in args]
    extra = [n for n in args if n not in names]
    if missing or extra:
        raise Error(Status.ARGS, f"check_layer: kernel {lk.id} takes {', '.join(names)}; "
                                 f"missing {missing or 'none'}, unknown {extra or 'none'}")
    kinds = {i.split("/")[1] for i in rt.kernels()} - {kind}
    kinds = {k for k in kinds if any(n.startswith(k + "_") for n in names)}
    kernels = {k: rt.kernel(k, rows, page_size=page_size) for k in sorted(kinds)}
    phases = layer_phases(names, {k: [n for n, _ in v._call_params] for k, v in kernels.items()})
    if not phases:
        raise Error(Status.ARGS, f"check_layer: kernel {lk.id} runs no kind of the model "
                                 f"as a phase")
    unknown = set(chain) - {k for k, _ in phases}
    if unknown:
        raise Error(Status.ARGS, f"check_layer: chain names {sorted(unknown)}, which are not "
                                 f"phases of {lk.id}")
    written = collections.OrderedDict()  # data_ptr -> (tensor, first parameter)
    for name, typ in lk._call_params:
        if typ.endswith("*") and not typ.startswith("const"):
            t = args[name]
            if not hasattr(t, "data_ptr") or not hasattr(t, "clone"):
                raise Error(Status.ARGS, f"check_layer: {name} ({typ}) is written, so it must be "
                                         f"a torch tensor to be copied, got {type(t).__name__}")
            written.setdefault(t.data_ptr(), (t, name))
    for name in names:
        t = args[name]
        if not hasattr(t, "data_ptr"):
            continue
        lo, hi = _extent(t)
        for w, wname in written.values():
            wlo, whi = _extent(w)
            if lo < whi and wlo < hi and (lo, hi) != (wlo, whi):
                raise Error(Status.ARGS, f"check_layer: {name} overlaps {wname} without being "
                                         f"the same tensor; give separate tensors")
    copies = {p: t.clone() for p, (t, _) in written.items()}
    if stream is None:
        stream = torch.cuda.current_stream(rt.device)
    with torch.cuda.stream(stream):
        for phase, params in phases:
            named = {}
            for p, name in params.items():
                v = args[name]
                named[p] = copies.get(v.data_ptr(), v) if hasattr(v, "data_ptr") else v
            if phase in chain:
                chain[phase](named, stream)
            else:
                k = kernels[phase]
                k(*[named[p] for p, _ in k._call_params], stream=stream)
        lk(*[args[n] for n in names], stream=stream)
    stream.synchronize()
    buffers = {b.arg for b in lk.buffers}
    writer = {name: (phase, p) for phase, params in phases for p, name in params.items()}
    for ptr, (t, name) in written.items():  # each tensor once, under its first writer
        if name in buffers:
            continue
        d = _first_difference(torch, t, copies[ptr])
        if d is not None:
            phase, p = writer.get(name, (kind, name))
            index, layer, ref = d
            return Difference(phase, p, index[0] if len(index) > 1 else None, index, layer, ref)
    return None
