// The cma backend: host memory of another proc on this host, copied by the kernel straight
// between the two processes (cross-memory attach: process_vm_readv / process_vm_writev), one
// copy, with no help from the owner once it confirmed the range. Where the kernel forbids
// it (a ptrace restriction, such as Yama's kernel.yama.ptrace_scope), that is found once, said
// in the log and in rdma_stats(), and the other backends serve from then on.

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "log/log.hpp"
#include "rdma/transfer.hpp"
#include "rdma/ucx.hpp"
#include "wire/cpus.hpp"

namespace baton::rdma_detail {
namespace {

/// Copies `size` bytes between `local` and `remote` in process `pid`; 0 or the errno (EPERM at
/// once where `refuse`: a test's stand-in for a kernel that refuses).
int cma_copy(pid_t pid, std::uint64_t remote, void* local, std::size_t size, bool reading,
             bool refuse) {
  if (refuse) return EPERM;
  std::size_t done = 0;
  while (done < size) {
    iovec here{static_cast<char*>(local) + done, size - done};
    iovec there{reinterpret_cast<void*>(remote + done), size - done};  // NOLINT: an address
    const ssize_t n = reading ? ::process_vm_readv(pid, &here, 1, &there, 1, 0)
                              : ::process_vm_writev(pid, &here, 1, &there, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EFAULT;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

/// cma_copy in parts on several threads at once: the kernel's copy pins and copies page by
/// page, and one thread does not reach the memory's bandwidth. 0 or the first errno.
int cma_copy_parallel(pid_t pid, std::uint64_t remote, void* local, std::size_t size, bool reading,
                      bool refuse) {
  constexpr std::size_t kPart = std::size_t{8} << 20;  // the least worth a thread
  constexpr std::size_t kMostParts = 4;
  const std::size_t parts = std::min<std::size_t>({wire::usable_cpus(), kMostParts, size / kPart});
  if (parts <= 1) return cma_copy(pid, remote, local, size, reading, refuse);
  std::vector<int> errors(parts, 0);
  std::vector<std::thread> helpers;
  helpers.reserve(parts - 1);
  auto part = [&](std::size_t i) {
    const std::size_t begin = i * size / parts;
    const std::size_t end = (i + 1) * size / parts;
    errors[i] = cma_copy(pid, remote + begin, static_cast<char*>(local) + begin, end - begin,
                         reading, refuse);
  };
  for (std::size_t i = 1; i < parts; ++i) helpers.emplace_back(part, i);
  part(0);
  for (auto& t : helpers) t.join();
  for (int e : errors) {
    if (e != 0) return e;
  }
  return 0;
}

}  // namespace

void transfer_cma(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                  std::size_t size, std::size_t offset, bool local_device) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  ++op->state().settings.cma;
  op->state().settings.moved(RdmaBackend::cma, size, dst != nullptr);
  check_then(op, b, offset, size, [op, b, d, dst, src, size, offset, reading, local_device] {
    int error = 0;
    // Guarded: a transfer that timed out meanwhile has completed, and its memory is no longer
    // the caller's to touch.
    const bool ran = op->guarded([&] {
      error = cma_copy_parallel(d.pid, d.address + offset, reading ? dst : const_cast<void*>(src),
                                size, reading, op->state().settings.cma_refuse_for_test.load());
    });
    if (!ran || error == 0) return;
    if (error == EPERM && op->state().settings.backend.load() != RdmaBackend::cma) {
      const std::string why = std::string(reading ? "process_vm_readv" : "process_vm_writev") +
                              ": " + std::strerror(error) +
                              " (a ptrace restriction: kernel.yama.ptrace_scope, or another "
                              "user's process)";
      op->state().settings.refuse_cma(why);
      detail::log_warn(
          "cross-memory attach is refused here ({}): RdmaBuffer transfers between procs of this "
          "host go through UCX or messages instead",
          why);
      op->add(true);  // the other backend's setup ends with a done() of its own
      if (!d.ucx_worker.empty() && op->state().ucx() != nullptr) {
        transfer_ucx(op, b, dst, src, size, offset, local_device);
      } else {
        transfer_messages(op, b, dst, src, size, offset, local_device);
      }
      return;
    }
    throw std::runtime_error(std::string("cross-memory attach to the owner (pid ") +
                             std::to_string(d.pid) + ") failed: " + std::strerror(error));
  });
  op->done(true);
}

}  // namespace baton::rdma_detail
