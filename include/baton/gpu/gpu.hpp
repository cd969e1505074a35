#pragma once

// One device API over CUDA and HIP. The vendor runtime (libcudart or libamdhip64) is loaded with
// dlopen the first time it is needed, so the same binary runs on NVIDIA, on AMD and with no GPU;
// nothing here needs a vendor header to build.
//
//   auto& g = baton::gpu::api();           // BATON_GPU=cuda|hip|none forces a choice
//   if (g.available()) {
//     void* d = g.allocate(1 << 20);
//     g.copy(d, host, 1 << 20);             // any direction: the runtime knows where both live
//     g.free(d);
//   }
//
// Invariants:
//   G-1 A failed vendor call throws GpuError naming the call, the vendor's error name and text;
//       the error is cleared afterwards, so a later call never reports a stale error (HIP keeps
//       errors until read; CUDA clears non-sticky ones: both now behave like the latter).
//   G-2 With no usable GPU every entry point but the queries throws NoGpuError saying why
//       (which libraries were tried, what they answered) and what to do; none crashes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace baton::gpu {

enum class Vendor : std::uint8_t { none, cuda, hip };
std::string_view to_string(Vendor v);

/// A vendor call failed (G-1).
class GpuError : public std::runtime_error {
 public:
  GpuError(const std::string& message, int code = 0) : std::runtime_error(message), code_(code) {}
  /// The vendor's error code, 0 when the failure was not a vendor call.
  int code() const { return code_; }

 private:
  int code_;
};

/// No GPU runtime or no device: the message says which were tried and what they answered (G-2).
class NoGpuError : public GpuError {
 public:
  using GpuError::GpuError;
};

struct DeviceProperties {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;
  int major = 0;  // compute capability (CUDA) or its HIP equivalent
  int minor = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
};

/// Where a pointer's memory lives.
struct PointerInfo {
  bool device = false;  // device (or managed) memory of `device_index`
  int device_index = -1;
};

/// Lets another process on the same host open a device allocation. Small and serializable.
struct IpcHandle {
  Vendor vendor = Vendor::none;
  std::array<std::uint8_t, 64> bytes{};
  std::uint64_t offset = 0;  // of the exported pointer from its allocation's start
  int device = -1;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(vendor, bytes, offset, device);
  }
};

namespace detail {
/// Destroys a vendor object (a stream, an event) and clears any error that leaves behind (G-1).
struct NativeDeleter {
  int (*destroy)(void*) = nullptr;
  int (*clear)() = nullptr;
  void operator()(void* p) const {
    if (destroy != nullptr) {
      destroy(p);
      clear();
    }
  }
};
using NativeHandle = std::unique_ptr<void, NativeDeleter>;
}  // namespace detail

class DeviceApi;

/// An asynchronous queue of device work; destroyed with its owner object.
class Stream {
 public:
  Stream() = default;
  void* native() const { return h_.get(); }

 private:
  friend class DeviceApi;
  explicit Stream(detail::NativeHandle h) : h_(std::move(h)) {}
  detail::NativeHandle h_;
};

/// A point in a stream that other streams and the host can wait for.
class Event {
 public:
  Event() = default;
  void* native() const { return h_.get(); }

 private:
  friend class DeviceApi;
  explicit Event(detail::NativeHandle h) : h_(std::move(h)) {}
  detail::NativeHandle h_;
};

/// What loading one vendor's runtime found (for diagnostics and tests).
struct Probe {
  Vendor vendor = Vendor::none;
  bool loaded = false;      // the library was found and has every entry point we use
  std::string library;      // the file that was loaded, or the names tried
  int runtime_version = 0;  // as the vendor encodes it (CUDA 13.0: 13000)
  int device_count = 0;
  std::string error;  // why there is no device, if there is none
};

/// The process's device API: one vendor's runtime, or none.
class DeviceApi {
 public:
  /// Loads the vendor named by `choice` ("cuda", "hip", "none", or empty for the first one
  /// present with a device). Prefer api(), which loads once per process.
  explicit DeviceApi(std::string_view choice);
  ~DeviceApi();
  DeviceApi(const DeviceApi&) = delete;
  DeviceApi& operator=(const DeviceApi&) = delete;

  Vendor vendor() const;
  /// One line: the vendor, library, version and device count, or why there is no GPU.
  const std::string& status() const;
  /// What was tried while loading, one entry per vendor.
  const std::vector<Probe>& probes() const;
  int device_count() const;
  bool available() const { return device_count() > 0; }

  DeviceProperties properties(int device) const;
  void set_device(int device) const;
  int current_device() const;

  void* allocate(std::size_t bytes) const;
  void free(void* device_ptr) const;
  /// Copies between any two of host and device memory; returns when done.
  void copy(void* dst, const void* src, std::size_t bytes) const;
  void copy_async(void* dst, const void* src, std::size_t bytes, const Stream& stream) const;
  /// Sets device memory to `byte`; returns when done.
  void fill(void* device_ptr, int byte, std::size_t bytes) const;
  void synchronize() const;

  Stream create_stream() const;
  void synchronize(const Stream& stream) const;
  Event create_event() const;
  void record(const Event& event, const Stream& stream) const;
  /// Work queued on `stream` after this waits for `event`.
  void wait(const Stream& stream, const Event& event) const;
  void synchronize(const Event& event) const;
  bool ready(const Event& event) const;

  /// Exports device memory at `device_ptr` for another process on this host.
  IpcHandle export_handle(const void* device_ptr) const;
  /// Opens an exported allocation; returns the exported pointer's address in this process.
  void* open_handle(const IpcHandle& handle) const;
  /// Closes what open_handle returned.
  void close_handle(void* opened) const;

  /// The vendor's pending error (its GetLastError), 0 when none; reading clears it (G-1).
  int pending_error() const;

  /// Whether `p` is device memory, and whose; host memory of any kind is not.
  PointerInfo pointer_info(const void* p) const;
  /// Whether `p` is device memory of a GPU here: false, never an error, where there is none
  /// (the vendor runtime is looked for once).
  bool is_device(const void* p) const { return available() && pointer_info(p).device; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The process's device API, loaded on first use from BATON_GPU (unset: whatever is present).
DeviceApi& api();

/// Loads one vendor's runtime on its own and reports what it found; never throws.
Probe probe(Vendor vendor);

}  // namespace baton::gpu
