#include "collective/nccl.hpp"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "baton/gpu/gpu.hpp"

namespace baton::collective::nccl {
namespace {

// NCCL's C interface, as both NCCL and RCCL export it: ncclResult_t is an int, a communicator
// and a stream are pointers, the unique id travels by value.
using Result = int;
constexpr Result kSuccess = 0;
constexpr Result kInProgress = 7;
struct RawId {
  char internal[128];
};
/// ncclConfig_t as NCCL 2.14 defined it (size, magic, version, blocking): later versions read
/// only the fields a config of this version has and default the rest.
struct Config2_14 {
  std::size_t size = sizeof(Config2_14);
  unsigned magic = 0xcafebeef;
  unsigned version = 21400;  // NCCL_VERSION(2, 14, 0)
  int blocking = 0;
  int unset = INT_MIN;  // where 2.17 put cgaClusterSize: what NCCL calls undefined
};
constexpr int kMinVersion = 21400;

struct Library {
  std::string error;  // why it is not usable; empty when it is
  std::string name;
  int version = 0;
  Result (*GetVersion)(int*) = nullptr;
  Result (*GetUniqueId)(RawId*) = nullptr;
  Result (*CommInitRankConfig)(void**, int, RawId, int, Config2_14*) = nullptr;
  Result (*CommAbort)(void*) = nullptr;
  Result (*CommDestroy)(void*) = nullptr;
  Result (*CommGetAsyncError)(void*, Result*) = nullptr;
  const char* (*GetErrorString)(Result) = nullptr;
  const char* (*GetLastError)(void*) = nullptr;  // 2.13 and later; optional
  Result (*AllReduce)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;
  Result (*Broadcast)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;
  Result (*AllGather)(const void*, void*, std::size_t, int, void*, void*) = nullptr;
  Result (*ReduceScatter)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;

  template <class Fn>
  void bind(void* lib, Fn& slot, const char* symbol, std::string& missing) {
    slot = reinterpret_cast<Fn>(::dlsym(lib, symbol));  // NOLINT: dlsym gives the function
    if (slot == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  }

  Library() {
    auto& gpu = gpu::api();
    if (!gpu.available()) {
      error = "no GPU here (" + gpu.status() + ")";
      return;
    }
    const bool hip = gpu.vendor() == gpu::Vendor::hip;
    std::vector<const char*> names =
        hip ? std::vector<const char*>{"librccl.so.1", "librccl.so", "/opt/rocm/lib/librccl.so"}
            : std::vector<const char*>{"libnccl.so.2", "libnccl.so"};
    if (const char* forced = std::getenv("BATON_NCCL")) names = {forced};
    void* lib = nullptr;
    std::string tried;
    for (const char* n : names) {
      lib = ::dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        name = n;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + std::string(n);
    }
    if (lib == nullptr) {
      error = std::string("no ") + (hip ? "RCCL" : "NCCL") + " library found (tried " + tried +
              "): install " + (hip ? "RCCL (rccl)" : "NCCL (libnccl2)") +
              ", or set BATON_NCCL to the library's path";
      return;
    }
    std::string missing;
    bind(lib, GetVersion, "ncclGetVersion", missing);
    bind(lib, GetUniqueId, "ncclGetUniqueId", missing);
    bind(lib, CommInitRankConfig, "ncclCommInitRankConfig", missing);
    bind(lib, CommAbort, "ncclCommAbort", missing);
    bind(lib, CommDestroy, "ncclCommDestroy", missing);
    bind(lib, CommGetAsyncError, "ncclCommGetAsyncError", missing);
    bind(lib, GetErrorString, "ncclGetErrorString", missing);
    bind(lib, AllReduce, "ncclAllReduce", missing);
    bind(lib, Broadcast, "ncclBroadcast", missing);
    bind(lib, AllGather, "ncclAllGather", missing);
    bind(lib, ReduceScatter, "ncclReduceScatter", missing);
    GetLastError = reinterpret_cast<decltype(GetLastError)>(  // NOLINT
        ::dlsym(lib, "ncclGetLastError"));
    if (!missing.empty()) {
      error = name + " lacks " + missing + ": it is older than 2.14; install a newer one";
      return;
    }
    GetVersion(&version);
    if (version < kMinVersion) {
      error = name + " is version " + std::to_string(version) + "; 2.14 or later is needed";
    }
  }
};

const Library& library() {
  static const Library lib;  // a loaded library is process-wide by nature
  return lib;
}

int nccl_type(DType t) {
  switch (t) {
    case DType::i8:
      return 0;
    case DType::u8:
      return 1;
    case DType::i32:
      return 2;
    case DType::i64:
      return 4;
    case DType::f16:
      return 6;
    case DType::f32:
      return 7;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 9;
  }
  return 7;
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return 0;
    case ReduceOp::max:
      return 2;
    case ReduceOp::min:
      return 3;
    case ReduceOp::avg:
      return 4;
  }
  return 0;
}

}  // namespace

std::string device_collectives_unavailable() {
  return library().error;
}

DeviceCommId make_device_comm_id() {
  const Library& l = library();
  if (!l.error.empty()) throw gpu::NoGpuError("collectives on device memory: " + l.error);
  RawId raw{};
  if (Result rc = l.GetUniqueId(&raw); rc != kSuccess) {
    throw gpu::GpuError(std::string("ncclGetUniqueId: ") + l.GetErrorString(rc), rc);
  }
  DeviceCommId id{};
  std::copy(std::begin(raw.internal), std::end(raw.internal), id.begin());
  return id;
}

struct DeviceComm::Impl {
  const Library& l = library();
  void* comm = nullptr;
  bool broken = false;
  int device = 0;
  std::chrono::milliseconds timeout;
  std::function<void()> alive;
  gpu::Stream stream;
  gpu::Event done;

  /// Throws (after aborting) unless `rc` is success or in progress.
  void check(Result rc, const char* what) {
    if (rc == kSuccess || rc == kInProgress) return;
    throw_failure(rc, what);
  }
  [[noreturn]] void throw_failure(Result rc, const char* what) {
    std::string detail = l.GetErrorString(rc);
    if (l.GetLastError != nullptr && comm != nullptr) {
      if (const char* last = l.GetLastError(comm); last != nullptr && *last != '\0') {
        detail += ": " + std::string(last);
      }
    }
    abort();
    throw std::runtime_error(std::string(what) + ": " + detail);
  }
  void abort() {
    if (comm != nullptr && !broken) l.CommAbort(comm);
    broken = true;
  }

  /// Waits until the communicator's queued call is taken and, if `queued`, the stream has run
  /// it: polls the library's error, the timeout and (each second) the other ranks.
  void wait(const char* what, bool queued) {
    const auto start = std::chrono::steady_clock::now();
    auto next_check = start + std::chrono::seconds(1);
    auto pause = std::chrono::microseconds(20);
    bool recorded = false;
    for (;;) {
      Result state = kSuccess;
      l.CommGetAsyncError(comm, &state);
      if (state != kSuccess && state != kInProgress) throw_failure(state, what);
      if (state == kSuccess) {
        if (!queued) return;
        if (!recorded) {
          gpu::api().record(done, stream);
          recorded = true;
        }
        if (gpu::api().ready(done)) return;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - start > timeout) {
        abort();
        throw std::runtime_error(std::string(what) + " made no progress in " +
                                 std::to_string(timeout.count()) + " ms");
      }
      if (now > next_check) {
        try {
          alive();
        } catch (...) {
          abort();
          throw;
        }
        next_check = now + std::chrono::seconds(1);
      }
      std::this_thread::sleep_for(pause);  // polling the device, not synchronising threads
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }

  /// One collective: on the right device, once the device's queued work is done, `enqueue`
  /// (given the communicator and stream) queues it; returns once it has run.
  template <class F>
  void run(const char* what, F enqueue) {
    if (broken) throw std::runtime_error(std::string(what) + ": the communicator was aborted");
    gpu::api().set_device(device);
    gpu::api().synchronize();
    check(enqueue(comm, stream.native()), what);
    wait(what, true);
  }
};

DeviceComm::DeviceComm(const DeviceCommId& id, int rank, int size, int device,
                       std::chrono::milliseconds timeout, std::function<void()> alive)
    : impl_(std::make_unique<Impl>()) {
  Impl& c = *impl_;
  if (!c.l.error.empty()) throw gpu::NoGpuError("collectives on device memory: " + c.l.error);
  c.device = device;
  c.timeout = timeout;
  c.alive = std::move(alive);
  gpu::api().set_device(device);
  c.stream = gpu::api().create_stream();
  c.done = gpu::api().create_event();
  RawId raw{};
  std::copy(id.begin(), id.end(), std::begin(raw.internal));
  Config2_14 config;
  c.check(c.l.CommInitRankConfig(&c.comm, size, raw, rank, &config), "ncclCommInitRankConfig");
  c.wait("ncclCommInitRankConfig", false);
}

DeviceComm::~DeviceComm() {
  if (impl_->comm == nullptr || impl_->broken) return;
  impl_->l.CommDestroy(impl_->comm);
}

void DeviceComm::abort() {
  impl_->abort();
}

void DeviceComm::allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  impl_->run("ncclAllReduce", [&](void* comm, void* stream) {
    return impl_->l.AllReduce(data, data, count, nccl_type(type), nccl_op(op), comm, stream);
  });
}

void DeviceComm::broadcast(void* data, std::size_t bytes, int root) {
  impl_->run("ncclBroadcast", [&](void* comm, void* stream) {
    return impl_->l.Broadcast(data, data, bytes, nccl_type(DType::u8), root, comm, stream);
  });
}

void DeviceComm::allgather(const void* in, std::size_t in_bytes, void* out) {
  impl_->run("ncclAllGather", [&](void* comm, void* stream) {
    return impl_->l.AllGather(in, out, in_bytes, nccl_type(DType::u8), comm, stream);
  });
}

void DeviceComm::reduce_scatter(const void* in, void* out, std::size_t out_count, DType type,
                                ReduceOp op) {
  impl_->run("ncclReduceScatter", [&](void* comm, void* stream) {
    return impl_->l.ReduceScatter(in, out, out_count, nccl_type(type), nccl_op(op), comm, stream);
  });
}

}  // namespace baton::collective::nccl
