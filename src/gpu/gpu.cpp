#include "baton/gpu/gpu.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace baton::gpu {

std::string_view to_string(Vendor v) {
  switch (v) {
    case Vendor::cuda:
      return "cuda";
    case Vendor::hip:
      return "hip";
    case Vendor::none:
      break;
  }
  return "none";
}

namespace {

// The vendors' runtimes name their entry points alike ("cuda" or "hip" + the same suffix) and
// pass the same arguments; enums and flag values that differ are looked up in VendorTraits.
struct RawIpc {
  char reserved[64];
};
using Err = int;
constexpr Err kNotReady = 600;  // cudaErrorNotReady == hipErrorNotReady

struct Fns {
  Err (*GetDeviceCount)(int*) = nullptr;
  Err (*GetDeviceProperties)(void*, int) = nullptr;
  Err (*DeviceGetAttribute)(int*, int, int) = nullptr;
  Err (*DeviceGetPCIBusId)(char*, int, int) = nullptr;
  Err (*SetDevice)(int) = nullptr;
  Err (*GetDevice)(int*) = nullptr;
  Err (*Malloc)(void**, std::size_t) = nullptr;
  Err (*Free)(void*) = nullptr;
  Err (*Memcpy)(void*, const void*, std::size_t, int) = nullptr;
  Err (*MemcpyAsync)(void*, const void*, std::size_t, int, void*) = nullptr;
  Err (*Memset)(void*, int, std::size_t) = nullptr;
  Err (*DeviceSynchronize)() = nullptr;
  Err (*StreamCreateWithFlags)(void**, unsigned) = nullptr;
  Err (*StreamDestroy)(void*) = nullptr;
  Err (*StreamSynchronize)(void*) = nullptr;
  Err (*EventCreateWithFlags)(void**, unsigned) = nullptr;
  Err (*EventDestroy)(void*) = nullptr;
  Err (*EventRecord)(void*, void*) = nullptr;
  Err (*StreamWaitEvent)(void*, void*, unsigned) = nullptr;
  Err (*EventSynchronize)(void*) = nullptr;
  Err (*EventQuery)(void*) = nullptr;
  Err (*IpcGetMemHandle)(RawIpc*, void*) = nullptr;
  Err (*IpcOpenMemHandle)(void**, RawIpc, unsigned) = nullptr;
  Err (*IpcCloseMemHandle)(void*) = nullptr;
  Err (*PointerGetAttributes)(void*, const void*) = nullptr;
  const char* (*GetErrorName)(Err) = nullptr;
  const char* (*GetErrorString)(Err) = nullptr;
  Err (*GetLastError)() = nullptr;
  Err (*RuntimeGetVersion)(int*) = nullptr;
  // HIP has it in the runtime; CUDA only in the driver (cuMemGetAddressRange_v2).
  Err (*MemGetAddressRange)(void**, std::size_t*, void*) = nullptr;
  Err (*CuMemGetAddressRange)(std::uint64_t*, std::size_t*, std::uint64_t) = nullptr;
};

struct VendorTraits {
  Vendor vendor;
  const char* prefix;
  std::vector<const char*> libraries;
  int attr_major, attr_minor, attr_multiprocessors;
  unsigned ipc_open_flags;
};

const VendorTraits& traits(Vendor v) {
  // cudaDevAttr*: 75, 76, 16; cudaIpcMemLazyEnablePeerAccess = 1.
  static const VendorTraits cuda{Vendor::cuda,
                                 "cuda",
                                 {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                  "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"},
                                 75,
                                 76,
                                 16,
                                 1};
  // hipDeviceAttribute*: 23, 61, 63 (ROCm 5 and 6); hipIpcMemLazyEnablePeerAccess = 0.
  static const VendorTraits hip{
      Vendor::hip,
      "hip",
      {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"},
      23,
      61,
      63,
      0};
  return v == Vendor::hip ? hip : cuda;
}

constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDisableTiming = 2;
constexpr int kMemcpyDefault = 4;

/// One loaded vendor runtime. Libraries are never unloaded: vendors' runtimes do not support it.
struct Loaded {
  Probe probe;
  Fns f;
  const VendorTraits* t = nullptr;

  template <class Fn>
  bool bind(void* lib, Fn& slot, const std::string& suffix, std::string& missing,
            const char* alt = nullptr) {
    std::string name = std::string(t->prefix) + suffix;
    void* sym = ::dlsym(lib, name.c_str());
    if (sym == nullptr && alt != nullptr)
      sym = ::dlsym(lib, (t->prefix + std::string(alt)).c_str());
    if (sym == nullptr) {
      missing += (missing.empty() ? "" : ", ") + name;
      return false;
    }
    slot = reinterpret_cast<Fn>(sym);  // NOLINT: dlsym's result is the function's address
    return true;
  }

  explicit Loaded(Vendor v) {
    t = &traits(v);
    probe.vendor = v;
    void* lib = nullptr;
    std::string tried;
    if (const char* forced = std::getenv(v == Vendor::cuda ? "BATON_CUDART" : "BATON_HIPRT")) {
      lib = ::dlopen(forced, RTLD_NOW | RTLD_LOCAL);
      probe.library = forced;
      if (lib == nullptr) tried = ::dlerror();
    } else {
      for (const char* name : t->libraries) {
        lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib != nullptr) {
          probe.library = name;
          break;
        }
        tried += (tried.empty() ? "" : ", ") + std::string(name);
      }
    }
    if (lib == nullptr) {
      probe.error = "no " + std::string(v == Vendor::cuda ? "CUDA" : "HIP") +
                    " runtime found (tried " + tried + ")";
      return;
    }
    std::string missing;
    bind(lib, f.GetDeviceCount, "GetDeviceCount", missing);
    bind(lib, f.GetDeviceProperties, "GetDeviceProperties", missing,
         v == Vendor::cuda ? "GetDeviceProperties_v2" : "GetDevicePropertiesR0600");
    bind(lib, f.DeviceGetAttribute, "DeviceGetAttribute", missing);
    bind(lib, f.DeviceGetPCIBusId, "DeviceGetPCIBusId", missing);
    bind(lib, f.SetDevice, "SetDevice", missing);
    bind(lib, f.GetDevice, "GetDevice", missing);
    bind(lib, f.Malloc, "Malloc", missing);
    bind(lib, f.Free, "Free", missing);
    bind(lib, f.Memcpy, "Memcpy", missing);
    bind(lib, f.MemcpyAsync, "MemcpyAsync", missing);
    bind(lib, f.Memset, "Memset", missing);
    bind(lib, f.DeviceSynchronize, "DeviceSynchronize", missing);
    bind(lib, f.StreamCreateWithFlags, "StreamCreateWithFlags", missing);
    bind(lib, f.StreamDestroy, "StreamDestroy", missing);
    bind(lib, f.StreamSynchronize, "StreamSynchronize", missing);
    bind(lib, f.EventCreateWithFlags, "EventCreateWithFlags", missing);
    bind(lib, f.EventDestroy, "EventDestroy", missing);
    bind(lib, f.EventRecord, "EventRecord", missing);
    bind(lib, f.StreamWaitEvent, "StreamWaitEvent", missing);
    bind(lib, f.EventSynchronize, "EventSynchronize", missing);
    bind(lib, f.EventQuery, "EventQuery", missing);
    bind(lib, f.IpcGetMemHandle, "IpcGetMemHandle", missing);
    bind(lib, f.IpcOpenMemHandle, "IpcOpenMemHandle", missing);
    bind(lib, f.IpcCloseMemHandle, "IpcCloseMemHandle", missing);
    bind(lib, f.PointerGetAttributes, "PointerGetAttributes", missing);
    bind(lib, f.GetErrorName, "GetErrorName", missing);
    bind(lib, f.GetErrorString, "GetErrorString", missing);
    bind(lib, f.GetLastError, "GetLastError", missing);
    bind(lib, f.RuntimeGetVersion, "RuntimeGetVersion", missing);
    if (v == Vendor::hip) bind(lib, f.MemGetAddressRange, "MemGetAddressRange", missing);
    if (!missing.empty()) {
      probe.error = probe.library + " lacks " + missing;
      return;
    }
    if (v == Vendor::cuda) {
      // The driver library comes with any NVIDIA driver; without one there are no devices.
      if (void* drv = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
        f.CuMemGetAddressRange = reinterpret_cast<decltype(f.CuMemGetAddressRange)>(  // NOLINT
            ::dlsym(drv, "cuMemGetAddressRange_v2"));
      }
    }
    probe.loaded = true;
    f.RuntimeGetVersion(&probe.runtime_version);
    int count = 0;
    Err rc = f.GetDeviceCount(&count);
    f.GetLastError();  // G-1: HIP leaves an error behind even here
    if (rc != 0) {
      probe.error = std::string(t->prefix) + "GetDeviceCount: " + f.GetErrorString(rc) + " (" +
                    f.GetErrorName(rc) + ")";
      count = 0;
    } else if (count == 0) {
      probe.error = std::string(t->prefix) + "GetDeviceCount found no device";
    }
    probe.device_count = count;
  }
};

std::string describe(const Probe& p) {
  std::string s(to_string(p.vendor));
  if (!p.loaded) return s + ": " + p.error;
  s += " runtime " + std::to_string(p.runtime_version) + " (" + p.library + ")";
  if (p.device_count == 0) return s + ": " + p.error;
  return s + ", " + std::to_string(p.device_count) + " device(s)";
}

}  // namespace

struct DeviceApi::Impl {
  std::vector<Probe> probes;
  std::unique_ptr<Loaded> loaded;  // null: no GPU
  std::string status;
  std::mutex mu;
  std::unordered_map<void*, void*> opened;  // what open_handle returned -> the mapping's base

  const Fns& f() const { return loaded->f; }
  const char* prefix() const { return loaded->t->prefix; }

  void require() const {
    if (loaded == nullptr) {
      throw NoGpuError(
          "no GPU: " + status +
          ". Run this on a machine with a GPU and its driver, or keep the work on the host "
          "(BATON_GPU=none says so explicitly)");
    }
  }
  void check(Err rc, const char* call, const std::string& args = {}) const {
    if (rc == 0) return;
    f().GetLastError();  // G-1: clear it, so the next call starts clean
    throw GpuError(std::string(prefix()) + call + "(" + args +
                       ") failed: " + f().GetErrorString(rc) + " (" + f().GetErrorName(rc) + ", " +
                       std::to_string(rc) + ")",
                   rc);
  }
};

DeviceApi::DeviceApi(std::string_view choice) : impl_(std::make_unique<Impl>()) {
  auto take = [this](Vendor v) {
    auto l = std::make_unique<Loaded>(v);
    impl_->probes.push_back(l->probe);
    if (l->probe.loaded && l->probe.device_count > 0) {
      impl_->status = describe(l->probe);
      impl_->loaded = std::move(l);
      return true;
    }
    return false;
  };
  if (choice == "none") {
    impl_->status = "GPU use is off (BATON_GPU=none)";
    return;
  }
  if (choice == "cuda" || choice == "hip") {
    if (!take(choice == "cuda" ? Vendor::cuda : Vendor::hip)) {
      impl_->status = "BATON_GPU=" + std::string(choice) + " but " + describe(impl_->probes[0]);
    }
    return;
  }
  if (!choice.empty()) {
    impl_->status = "BATON_GPU='" + std::string(choice) + "' is not one of cuda, hip, none";
    return;
  }
  if (take(Vendor::cuda) || take(Vendor::hip)) return;
  impl_->status = describe(impl_->probes[0]) + "; " + describe(impl_->probes[1]);
}

DeviceApi::~DeviceApi() = default;

Vendor DeviceApi::vendor() const {
  return impl_->loaded ? impl_->loaded->probe.vendor : Vendor::none;
}
const std::string& DeviceApi::status() const {
  return impl_->status;
}
const std::vector<Probe>& DeviceApi::probes() const {
  return impl_->probes;
}
int DeviceApi::device_count() const {
  return impl_->loaded ? impl_->loaded->probe.device_count : 0;
}

DeviceProperties DeviceApi::properties(int device) const {
  impl_->require();
  const auto& t = *impl_->loaded->t;
  if (device < 0 || device >= device_count()) {
    throw GpuError("no GPU " + std::to_string(device) + ": this machine has " +
                   std::to_string(device_count()));
  }
  // The properties struct differs between versions; its name comes first in all of them, and
  // total memory sits after it (and, in CUDA 10+ and HIP 6, after a 28-byte id block).
  alignas(16) std::array<unsigned char, 8192> raw{};
  impl_->check(impl_->f().GetDeviceProperties(raw.data(), device), "GetDeviceProperties",
               std::to_string(device));
  DeviceProperties p;
  p.index = device;
  p.name = std::string(reinterpret_cast<const char*>(raw.data()),                   // NOLINT
                       ::strnlen(reinterpret_cast<const char*>(raw.data()), 256));  // NOLINT
  bool old_hip = t.vendor == Vendor::hip && impl_->loaded->probe.runtime_version < 60000000;
  std::memcpy(&p.total_memory, raw.data() + (old_hip ? 256 : 288), sizeof p.total_memory);
  impl_->check(impl_->f().DeviceGetAttribute(&p.major, t.attr_major, device), "DeviceGetAttribute",
               "major");
  impl_->check(impl_->f().DeviceGetAttribute(&p.minor, t.attr_minor, device), "DeviceGetAttribute",
               "minor");
  impl_->check(impl_->f().DeviceGetAttribute(&p.multiprocessors, t.attr_multiprocessors, device),
               "DeviceGetAttribute", "multiprocessors");
  std::array<char, 64> bus{};
  impl_->check(impl_->f().DeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device),
               "DeviceGetPCIBusId", std::to_string(device));
  p.pci_bus_id = bus.data();
  return p;
}

void DeviceApi::set_device(int device) const {
  impl_->require();
  impl_->check(impl_->f().SetDevice(device), "SetDevice", std::to_string(device));
}

int DeviceApi::current_device() const {
  impl_->require();
  int d = -1;
  impl_->check(impl_->f().GetDevice(&d), "GetDevice");
  return d;
}

void* DeviceApi::allocate(std::size_t bytes) const {
  impl_->require();
  void* p = nullptr;
  impl_->check(impl_->f().Malloc(&p, bytes), "Malloc", std::to_string(bytes) + " bytes");
  return p;
}

void DeviceApi::free(void* device_ptr) const {
  if (device_ptr == nullptr) return;
  impl_->require();
  impl_->check(impl_->f().Free(device_ptr), "Free");
}

void DeviceApi::copy(void* dst, const void* src, std::size_t bytes) const {
  impl_->require();
  impl_->check(impl_->f().Memcpy(dst, src, bytes, kMemcpyDefault), "Memcpy",
               std::to_string(bytes) + " bytes");
  // A device-to-device copy returns before it is done; waiting on the default stream, where it
  // runs, makes every direction synchronous.
  impl_->check(impl_->f().StreamSynchronize(nullptr), "StreamSynchronize", "default stream");
}

void DeviceApi::copy_async(void* dst, const void* src, std::size_t bytes,
                           const Stream& stream) const {
  impl_->require();
  impl_->check(impl_->f().MemcpyAsync(dst, src, bytes, kMemcpyDefault, stream.native()),
               "MemcpyAsync", std::to_string(bytes) + " bytes");
}

void DeviceApi::fill(void* device_ptr, int byte, std::size_t bytes) const {
  impl_->require();
  impl_->check(impl_->f().Memset(device_ptr, byte, bytes), "Memset",
               std::to_string(bytes) + " bytes");
  impl_->check(impl_->f().StreamSynchronize(nullptr), "StreamSynchronize", "default stream");
}

void DeviceApi::synchronize() const {
  impl_->require();
  impl_->check(impl_->f().DeviceSynchronize(), "DeviceSynchronize");
}

Stream DeviceApi::create_stream() const {
  impl_->require();
  void* s = nullptr;
  impl_->check(impl_->f().StreamCreateWithFlags(&s, kStreamNonBlocking), "StreamCreateWithFlags");
  return Stream(detail::NativeHandle(s, {impl_->f().StreamDestroy, impl_->f().GetLastError}));
}

void DeviceApi::synchronize(const Stream& stream) const {
  impl_->require();
  impl_->check(impl_->f().StreamSynchronize(stream.native()), "StreamSynchronize");
}

Event DeviceApi::create_event() const {
  impl_->require();
  void* e = nullptr;
  impl_->check(impl_->f().EventCreateWithFlags(&e, kEventDisableTiming), "EventCreateWithFlags");
  return Event(detail::NativeHandle(e, {impl_->f().EventDestroy, impl_->f().GetLastError}));
}

void DeviceApi::record(const Event& event, const Stream& stream) const {
  impl_->require();
  impl_->check(impl_->f().EventRecord(event.native(), stream.native()), "EventRecord");
}

void DeviceApi::wait(const Stream& stream, const Event& event) const {
  impl_->require();
  impl_->check(impl_->f().StreamWaitEvent(stream.native(), event.native(), 0), "StreamWaitEvent");
}

void DeviceApi::synchronize(const Event& event) const {
  impl_->require();
  impl_->check(impl_->f().EventSynchronize(event.native()), "EventSynchronize");
}

bool DeviceApi::ready(const Event& event) const {
  impl_->require();
  Err rc = impl_->f().EventQuery(event.native());
  if (rc == kNotReady) {
    impl_->f().GetLastError();
    return false;
  }
  impl_->check(rc, "EventQuery");
  return true;
}

IpcHandle DeviceApi::export_handle(const void* device_ptr) const {
  impl_->require();
  PointerInfo info = pointer_info(device_ptr);
  if (!info.device) {
    throw GpuError("export_handle needs device memory; this pointer is host memory");
  }
  const Fns& f = impl_->f();
  void* base = nullptr;
  std::size_t size = 0;
  if (f.MemGetAddressRange != nullptr) {
    impl_->check(f.MemGetAddressRange(&base, &size, const_cast<void*>(device_ptr)),  // NOLINT
                 "MemGetAddressRange");
  } else if (f.CuMemGetAddressRange != nullptr) {
    std::uint64_t b = 0;
    Err rc = f.CuMemGetAddressRange(&b, &size, reinterpret_cast<std::uint64_t>(device_ptr));
    if (rc != 0) throw GpuError("cuMemGetAddressRange_v2 failed (" + std::to_string(rc) + ")", rc);
    base = reinterpret_cast<void*>(b);  // NOLINT
  } else {
    base = const_cast<void*>(device_ptr);  // NOLINT: no way to ask; assume an allocation's start
  }
  RawIpc raw{};
  impl_->check(f.IpcGetMemHandle(&raw, base), "IpcGetMemHandle");
  IpcHandle h;
  h.vendor = vendor();
  std::memcpy(h.bytes.data(), raw.reserved, sizeof raw.reserved);
  h.offset = static_cast<std::uint64_t>(static_cast<const char*>(device_ptr) -
                                        static_cast<const char*>(base));
  h.device = info.device_index;
  return h;
}

void* DeviceApi::open_handle(const IpcHandle& handle) const {
  impl_->require();
  if (handle.vendor != vendor()) {
    throw GpuError("an IPC handle from " + std::string(to_string(handle.vendor)) +
                   " cannot be opened with " + std::string(to_string(vendor())));
  }
  RawIpc raw{};
  std::memcpy(raw.reserved, handle.bytes.data(), sizeof raw.reserved);
  void* base = nullptr;
  impl_->check(impl_->f().IpcOpenMemHandle(&base, raw, impl_->loaded->t->ipc_open_flags),
               "IpcOpenMemHandle");
  void* at = static_cast<char*>(base) + handle.offset;
  std::lock_guard lock(impl_->mu);
  impl_->opened[at] = base;
  return at;
}

void DeviceApi::close_handle(void* opened) const {
  impl_->require();
  void* base = nullptr;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->opened.find(opened);
    if (it == impl_->opened.end()) {
      throw GpuError("close_handle: this pointer did not come from open_handle, or was closed");
    }
    base = it->second;
    impl_->opened.erase(it);
  }
  impl_->check(impl_->f().IpcCloseMemHandle(base), "IpcCloseMemHandle");
}

int DeviceApi::pending_error() const {
  impl_->require();
  return impl_->f().GetLastError();
}

PointerInfo DeviceApi::pointer_info(const void* p) const {
  PointerInfo info;
  if (impl_->loaded == nullptr || p == nullptr) return info;
  // {type, device, devicePointer, hostPointer, ...} in both; HIP 5 numbers the types from host=0
  // (device=1) and has isManaged at byte 24; CUDA and HIP 6 number unregistered=0, host=1,
  // device=2, managed=3.
  alignas(16) std::array<unsigned char, 128> raw{};
  Err rc = impl_->f().PointerGetAttributes(raw.data(), p);
  if (rc != 0) {
    impl_->f().GetLastError();  // plain host memory: HIP 5 says "invalid value"
    return info;
  }
  int type = 0;
  int device = -1;
  std::memcpy(&type, raw.data(), sizeof type);
  std::memcpy(&device, raw.data() + 4, sizeof device);
  bool old_hip = vendor() == Vendor::hip && impl_->loaded->probe.runtime_version < 60000000;
  if (old_hip) {
    int managed = 0;
    std::memcpy(&managed, raw.data() + 24, sizeof managed);
    info.device = type == 1 || managed != 0;
  } else {
    info.device = type == 2 || type == 3;
  }
  if (info.device) info.device_index = device;
  return info;
}

DeviceApi& api() {
  static DeviceApi* instance = [] {
    const char* choice = std::getenv("BATON_GPU");
    // Never destroyed: vendor runtimes tear themselves down at exit in their own order.
    return new DeviceApi(choice != nullptr ? choice : "");  // NOLINT
  }();
  return *instance;
}

Probe probe(Vendor vendor) {
  if (vendor == Vendor::none) return {};
  return Loaded(vendor).probe;
}

}  // namespace baton::gpu
