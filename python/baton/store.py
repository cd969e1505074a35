"""baton's tensor store: put and get numpy arrays, torch tensors, bytes and any picklable object
by key across a job, whole or as shards of a global tensor, read back as any box of it.

    store = baton.store.Store.create(procs)          # a volume in every proc
    store.put("w", weights).get()
    w = store.get("w").get()                           # a new tensor (or array)
    store.get("w", into=w).get()                       # into one of yours, no other copy

    # a trainer rank holding rows [0:4) of an 8 x 16 tensor
    store.put("w", rows, shard=Box([0, 0], [4, 16]), global_shape=[8, 16]).get()
    # or where DTensor puts them: Shard(0) over a mesh of 2, rank 0
    box = box_of([8, 16], [Shard(0)], [2], [0])
    # a reader's column block
    cols = store.get("w", box=Box([0, 8], [8, 8])).get()

    store.put_state_dict("policy", model.state_dict()).get()
    store.get_state_dict("policy", into=model.state_dict()).get()

Every put makes a new version of its key; a key is readable once the shards of a version cover
the whole tensor, and a reader always gets one whole version. A Store is a handle: pass it in
calls to actors, which use it the same way. Values read come back as torch tensors when torch
is imported in the process, as numpy arrays otherwise (bfloat16 needs torch). Missing keys
raise KeyNotFound (a KeyError), other refusals StoreError, both saying what to do.
"""

import pickle
import sys
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from . import _baton
from ._errors import KeyNotFound, StoreError, UsageError
from ._future import Deferred, Future
from ._mesh import ProcMesh

__all__ = [
    "Box",
    "DirectWriter",
    "KeyNotFound",
    "Put",
    "Replicate",
    "Shard",
    "Store",
    "StoreError",
    "box_of",
]

_PICKLE = "pickle"  # the dtype of a picklable object's bytes
_STATE_DICT = "state_dict"  # a state dict's manifest: its structure and its leaves' versions


class Box(NamedTuple):
    """A region of a global tensor: each dimension's first index and extent."""

    offsets: Sequence[int]
    sizes: Sequence[int]


class Put(NamedTuple):
    """The version a put went into, and whether that version is complete (readable) now."""

    version: int
    complete: bool


class Shard(NamedTuple):
    """DTensor's Shard(dim): the mesh dimension splits tensor dimension `dim` (torch.chunk's
    way)."""

    dim: int


class Replicate(NamedTuple):
    """DTensor's Replicate(): every rank of the mesh dimension holds the whole."""


def box_of(
    global_shape: Sequence[int],
    placements: Sequence[Any],
    mesh_shape: Sequence[int],
    coords: Sequence[int],
) -> Box:
    """The box of a tensor of `global_shape` that the rank at `coords` of a device mesh of
    `mesh_shape` holds under `placements` (one per mesh dimension: Shard(d) or Replicate(),
    torch's own DTensor placements too)."""
    kinds = []
    for p in placements:
        dim = getattr(p, "dim", None)
        if dim is not None and (isinstance(p, Shard) or type(p).__name__ == "Shard"):
            kinds.append(("shard", int(dim)))
        else:
            kinds.append(("replicate", 0))
    offsets, sizes = _baton.placement_box(
        [int(n) for n in global_shape], kinds, [int(n) for n in mesh_shape],
        [int(c) for c in coords],
    )
    return Box(offsets, sizes)


def _torch():
    return sys.modules.get("torch")


def _numpy():
    import numpy

    return numpy


def _describe(value: Any, what: str) -> Tuple[Any, int, int, str, int, List[int]]:
    """(owner, address, bytes, dtype, element size, shape) of a value's bytes."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            value = value.cpu()  # device memory goes through the host for now
        value = value.contiguous()
        return (
            value, value.data_ptr(), value.numel() * value.element_size(),
            str(value.dtype).replace("torch.", ""), value.element_size(), list(value.shape),
        )
    if hasattr(value, "__array_interface__") and hasattr(value, "dtype"):
        numpy = _numpy()
        a = numpy.ascontiguousarray(value)
        return a, a.ctypes.data, a.nbytes, a.dtype.name, a.itemsize, list(a.shape)
    if isinstance(value, (bytes, bytearray, memoryview)):
        numpy = _numpy()
        a = numpy.frombuffer(bytes(value), dtype=numpy.uint8)
        return a, a.ctypes.data, a.nbytes, "", 1, [a.nbytes]
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001: said with what failed
        raise UsageError(f"{what}: a {type(value).__name__} that cannot be pickled ({e})") from e
    numpy = _numpy()
    a = numpy.frombuffer(data, dtype=numpy.uint8)
    return a, a.ctypes.data, a.nbytes, _PICKLE, 1, [a.nbytes]


def _item(key: str, value: Any, shard: Optional[Box], global_shape, keep: int):
    owner, address, nbytes, dtype, element, shape = _describe(value, f"put of {key!r}")
    box = None
    if shard is not None:
        if global_shape is None:
            raise UsageError(f"put of {key!r}: a shard needs the global tensor's shape "
                             "(global_shape=...)")
        box = ([int(n) for n in shard[0]], [int(n) for n in shard[1]])
        shape = [int(n) for n in global_shape]
    elif global_shape is not None:
        raise UsageError(f"put of {key!r}: global_shape is for a shard (shard=Box(...))")
    if keep < 1:
        raise UsageError(f"put of {key!r}: keep={keep}; a key keeps at least 1 version")
    return owner, (key, address, nbytes, dtype, element, shape, box, int(keep))


def _value(buffer: Any, info: Tuple) -> Any:
    """What was read, as the value it was put as."""
    dtype, _element, _shape, box, _version = info
    if dtype == _PICKLE:
        return pickle.loads(bytes(buffer))
    if dtype == "":
        return bytes(buffer)
    sizes = list(box[1])
    torch = _torch()
    if torch is not None and hasattr(torch, dtype):
        t = torch.empty(sizes, dtype=getattr(torch, dtype))
        _baton.copy_buffer(buffer, t.data_ptr())
        return t
    numpy = _numpy()
    try:
        a = numpy.empty(sizes, dtype=numpy.dtype(dtype))
    except TypeError:
        raise UsageError(f"a tensor of {dtype} needs torch (import torch first)") from None
    _baton.copy_buffer(buffer, a.ctypes.data)
    return a


def _destination(into: Any, what: str) -> Tuple[Any, int, int, str]:
    """(owner, address, bytes, dtype) of a destination to read into."""
    torch = _torch()
    if torch is not None and isinstance(into, torch.Tensor):
        if not into.is_contiguous():
            raise UsageError(f"{what}: into a tensor that is not contiguous")
        return into, into.data_ptr(), into.numel() * into.element_size(), str(into.dtype)[6:]
    if hasattr(into, "__array_interface__") and hasattr(into, "dtype"):
        if not into.flags.c_contiguous or not into.flags.writeable:
            raise UsageError(f"{what}: into an array that is not contiguous and writeable")
        return into, into.ctypes.data, into.nbytes, into.dtype.name
    raise UsageError(f"{what}: into takes a numpy array or a torch tensor, not "
                     f"{type(into).__name__}")


def _memory(buffer: Any, what: str) -> Tuple[int, int, str, int, List[int]]:
    """(address, bytes, dtype, element size, shape) of memory of the caller's to write into."""
    _owner, address, nbytes, dtype = _destination(buffer, what)
    torch = _torch()
    if torch is not None and isinstance(buffer, torch.Tensor):
        if buffer.device.type != "cpu":
            raise UsageError(f"{what}: a tensor on {buffer.device} (direct mode takes host memory)")
        return address, nbytes, dtype, buffer.element_size(), list(buffer.shape)
    return address, nbytes, dtype, buffer.itemsize, list(buffer.shape)


class DirectWriter:
    """The writer's side of a key in direct mode (Store.direct): its versions live in the
    writer's own buffers and readers read them from there. Write a version only into the buffer
    acquire() gives (one no reader holds, not the published one), then publish() it."""

    def __init__(self, core: Any, buffers: List[Any]) -> None:
        self._core = core
        self.buffers = buffers  # the caller's memory: kept alive while the writer is

    def acquire(self) -> "Future[int]":
        """The index of the buffer to write the next version into."""
        return Future(self._core.acquire(), int)

    def publish(self, index: int) -> "Future[Put]":
        """Makes buffer `index` (acquired, and written since) the key's latest version."""
        return Future(self._core.publish(index), lambda p: Put(*p))

    def close(self) -> "Future[None]":
        """Erases the key and unregisters the buffers."""
        return Future(self._core.close(), lambda _: None)


def _store_from_wire(head, parts):
    return Store(_baton.Store.from_wire(head, parts))


def _flatten(tree: Dict[str, Any], path: str = "") -> Dict[str, Any]:
    """The leaves of a nested dict, by their dotted paths (torch's state-dict names)."""
    out: Dict[str, Any] = {}
    for name, v in tree.items():
        p = f"{path}.{name}" if path else str(name)
        if isinstance(v, dict):
            out.update(_flatten(v, p))
        else:
            out[p] = v
    return out


def _skeleton(tree: Dict[str, Any], path: str = "") -> Dict[str, Any]:
    """The nested structure, each leaf replaced by its dotted path."""
    out: Dict[str, Any] = {}
    for name, v in tree.items():
        p = f"{path}.{name}" if path else str(name)
        out[name] = _skeleton(v, p) if isinstance(v, dict) else p
    return out


def _rebuild(skeleton: Dict[str, Any], leaves: Dict[str, Any]) -> Dict[str, Any]:
    return {
        name: _rebuild(v, leaves) if isinstance(v, dict) else leaves[v]
        for name, v in skeleton.items()
    }


class Store:
    """A handle on a tensor store; see the module's description."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @classmethod
    def create(cls, procs: ProcMesh, spread: str = "per_proc", name: str = "store") -> "Store":
        """Spawns the store's volumes over `procs`: one in each proc ("per_proc") or one in the
        first ("single")."""
        return cls.create_async(procs, spread, name).get()

    @classmethod
    def create_async(
        cls, procs: ProcMesh, spread: str = "per_proc", name: str = "store"
    ) -> "Future[Store]":
        if not isinstance(procs, ProcMesh):
            raise UsageError("Store.create takes a proc mesh (this_host().spawn_procs(...))")
        return Future(_baton.store_create(procs._core, spread, name), cls)

    def handle(self) -> str:
        """The handle as text, for a C++ actor (which takes it as a string and makes it again
        with baton::store::Store::from_handle)."""
        return self._core.handle()

    @classmethod
    def from_handle(cls, text: str) -> "Store":
        return cls(_baton.Store.from_handle(text))

    def __reduce__(self):
        return (_store_from_wire, tuple(self._core.to_wire()))

    def __len__(self) -> int:
        return self._core.volumes()

    def put(
        self, key: str, value: Any, *, shard: Optional[Box] = None,
        global_shape: Optional[Sequence[int]] = None, keep: int = 1,
    ) -> "Future[Put]":
        """Puts `value` under `key` (its bytes are copied now: change it at will afterwards).
        With `shard`, the value is that box of a tensor of `global_shape`."""
        _owner, item = _item(key, value, shard, global_shape, keep)
        return Future(self._core.put(*item), lambda p: Put(*p))

    def put_batch(self, values: Any, *, keep: int = 1) -> "Future[List[Put]]":
        """Puts every (key, value) of a dict or list, all or nothing."""
        pairs = values.items() if isinstance(values, dict) else values
        owners, items = [], []
        for key, value in pairs:
            owner, item = _item(key, value, None, None, keep)
            owners.append(owner)
            items.append(item)
        return Future(self._core.put_batch(items), lambda done: [Put(*p) for p in done])

    def get(
        self, key: str, *, into: Any = None, box: Optional[Box] = None,
        version: Optional[int] = None,
    ) -> "Future[Any]":
        """Reads `key`: the whole tensor or `box` of it, the latest version or `version`; into
        a new tensor (or array, or the object put), or into `into` (which must have exactly
        the bytes read)."""
        b = None if box is None else ([int(n) for n in box[0]], [int(n) for n in box[1]])
        if into is None:
            return Future(self._core.get(key, version, b), lambda r: _value(*r))
        torch = _torch()
        if torch is not None and isinstance(into, torch.Tensor) and into.device.type != "cpu":
            return Deferred(lambda timeout: into.copy_(self.get(key, box=box,
                                                                version=version).get(timeout)))
        owner, address, nbytes, dtype = _destination(into, f"get of {key!r}")
        core = self._core.get_into(key, address, nbytes, version, b, dtype, owner)
        return Future(core, lambda _info: into)

    def get_batch(self, keys: Iterable[str]) -> "Future[List[Any]]":
        """Reads every key (whole, latest): all, or the first error."""
        return Future(self._core.get_batch(list(keys)), lambda all: [_value(*r) for r in all])

    def direct(self, key: str, buffers: Sequence[Any], *, lease: float = 10.0
               ) -> "Future[DirectWriter]":
        """Opens `key` in direct mode over `buffers`: two or more contiguous CPU tensors or
        numpy arrays of one dtype and shape, the writer's own memory, which readers' gets read
        from (nothing is copied into the store). A get holds its version for at most `lease`
        seconds."""
        what = f"direct writer of {key!r}"
        regions = [_memory(b, what) for b in buffers]
        if not regions:
            raise UsageError(f"{what}: no buffers (it needs at least 2)")
        _a, _n, dtype, element, shape = regions[0]
        for _a, _n, d, _e, s in regions[1:]:
            if d != dtype or s != shape:
                raise UsageError(f"{what}: buffers of {dtype}{shape} and {d}{s}; they must be "
                                 "alike")
        core = self._core.direct(key, [(a, n) for a, n, _d, _e, _s in regions], dtype, element,
                                 shape, int(lease * 1000))
        kept = list(buffers)
        return Future(core, lambda w: DirectWriter(w, kept))

    def exists(self, key: str) -> "Future[bool]":
        return Future(self._core.exists(key), bool)

    def keys(self, prefix: str = "") -> "Future[List[str]]":
        """The readable keys that start with `prefix` (a plain string: no separator is
        special), sorted."""
        return Future(self._core.keys(prefix), list)

    def delete(self, key: str) -> "Future[None]":
        """Drops every version of `key`; nothing happens for a key that is not there."""
        return Future(self._core.erase(key), lambda _: None)

    def latest_version(self, key: str) -> "Future[Optional[int]]":
        return Future(self._core.latest_version(key), lambda n: n)

    def stats(self) -> "Future[List[Dict[str, Any]]]":
        """Each volume's holdings and traffic: proc, keys, versions, bytes_held, puts, gets,
        bytes_in, bytes_out, and bytes_by_path / transfers_by_path: what moved by the path
        it took ("in-process", "shm" on one host, "unix", "tcp" or "tls" to another)."""
        return Future(self._core.stats(), list)

    def put_state_dict(self, prefix: str, state_dict: Dict[str, Any], *, keep: int = 2):
        """Puts a (nested) state dict: each leaf under "prefix/dotted.path", then its manifest
        under `prefix`, which names the version of every leaf. A reader gets the leaves of one
        manifest, so never a mix of two puts; `keep` (at least 2) lets a reader finish while
        the next put lands."""
        keep = max(int(keep), 2)

        def produce(timeout):
            leaves = _flatten(state_dict)
            done = self.put_batch(
                {f"{prefix}/{path}": v for path, v in leaves.items()}, keep=keep
            ).get(timeout)
            versions = {path: p.version for path, p in zip(leaves, done)}
            manifest = {"kind": _STATE_DICT, "skeleton": _skeleton(state_dict),
                        "versions": versions}
            return self.put(prefix, manifest, keep=keep).get(timeout)

        return Deferred(produce)

    def get_state_dict(
        self, prefix: str, into: Optional[Dict[str, Any]] = None, *, strict: bool = True,
        dtype: Any = None,
    ):
        """Reads the state dict put under `prefix`: a new nested dict, or into the tensors of
        `into` (as torch's load_state_dict: with `strict`, keys missing on either side raise
        StoreError naming them). `dtype` casts floating tensors on the way (bfloat16, say)."""

        def produce(timeout):
            for _ in range(8):  # a manifest whose leaves the store no longer keeps: read again
                manifest = self.get(prefix).get(timeout)
                if not isinstance(manifest, dict) or manifest.get("kind") != _STATE_DICT:
                    raise StoreError(f"key {prefix!r} holds no state dict (put_state_dict)")
                versions: Dict[str, int] = manifest["versions"]
                try:
                    return self._read_state_dict(prefix, manifest, versions, into, strict,
                                                 dtype, timeout)
                except KeyNotFound as e:
                    if "is not kept" not in str(e):
                        raise
            raise StoreError(f"get_state_dict of {prefix!r}: each read found newer leaves than "
                             "its manifest named; put_state_dict with a larger keep")

        return Deferred(produce)

    def _read_state_dict(self, prefix, manifest, versions, into, strict, dtype, timeout):
        torch = _torch()

        def cast(t):
            if dtype is None or torch is None or not isinstance(t, torch.Tensor):
                return t
            return t.to(dtype) if t.is_floating_point() else t

        if into is None:
            futures = {path: self.get(f"{prefix}/{path}", version=n)
                       for path, n in versions.items()}
            leaves = {path: cast(f.get(timeout)) for path, f in futures.items()}
            return _rebuild(manifest["skeleton"], leaves)
        wanted = _leaves(into)
        missing = sorted(set(wanted) - set(versions))
        unexpected = sorted(set(versions) - set(wanted))
        if strict and (missing or unexpected):
            raise StoreError(
                f"get_state_dict of {prefix!r}: missing key(s) in the store: {missing}; "
                f"unexpected key(s) in the store: {unexpected} (strict=False loads the rest)"
            )
        futures = {}
        for path, (node, name) in wanted.items():
            if path not in versions:
                continue
            key, dst = f"{prefix}/{path}", node[name]
            direct = (
                torch is not None and isinstance(dst, torch.Tensor) and dst.device.type == "cpu"
                and dst.is_contiguous()
            )
            # Straight into a tensor of the same type; through a new one where it casts.
            futures[path] = (self.get(key, version=versions[path], into=dst)
                             if direct else self.get(key, version=versions[path]))
        for path, f in futures.items():
            try:
                value = f.get(timeout)
            except StoreError as e:
                if "into a destination of" not in str(e):
                    raise
                value = self.get(f"{prefix}/{path}", version=versions[path]).get(timeout)
            node, name = wanted[path]
            dst = node[name]
            if value is dst:
                continue
            if torch is not None and isinstance(dst, torch.Tensor):
                if not isinstance(value, torch.Tensor) or tuple(dst.shape) != tuple(value.shape):
                    shape = list(getattr(value, "shape", [])) or type(value).__name__
                    raise StoreError(f"get_state_dict of {prefix!r}: {path} is {shape} in the "
                                     f"store, {list(dst.shape)} in into")
                with torch.no_grad():
                    dst.copy_(value)
            elif hasattr(dst, "__array_interface__"):
                dst[...] = value
            else:
                node[name] = value
        return into


def _leaves(tree: Dict[str, Any], path: str = "") -> Dict[str, Tuple[Dict[str, Any], str]]:
    """Where each leaf of a nested dict is: (the dict holding it, its name), by dotted path."""
    out: Dict[str, Tuple[Dict[str, Any], str]] = {}
    for name, v in tree.items():
        p = f"{path}.{name}" if path else str(name)
        if isinstance(v, dict):
            out.update(_leaves(v, p))
        else:
            out[p] = (tree, name)
    return out
