// The Python debugger's native side: the hook through which the admin API reaches the actors
// paused in breakpoint() (baton._debug), and the region a paused actor's thread waits in, so
// that its proc's other actors keep running.

#include <optional>
#include <string>
#include <vector>

#include "actor/debug.hpp"
#include "log/log.hpp"
#include "python/bindings.hpp"

namespace baton::python {
namespace {

py::module_ debug_module() {
  return py::module_::import("baton._debug");
}

/// A thread of the proc's pool waiting in a debugger: the pool runs the proc's other actors on
/// another meanwhile. Made and released on the same thread.
class BlockingRegion {
 public:
  explicit BlockingRegion(const std::string& what) : what_(what) { region_.emplace(what_.c_str()); }
  void release() { region_.reset(); }

 private:
  std::string what_;
  std::optional<Blocking> region_;
};

std::vector<detail::DebugSession> sessions() {
  std::vector<detail::DebugSession> out;
  if (Py_IsInitialized() == 0) return out;
  const Gil gil;
  try {
    for (const py::handle h : debug_module().attr("sessions")()) {
      const auto t = py::reinterpret_borrow<py::tuple>(h);
      out.push_back({t[0].cast<std::uint64_t>(), t[1].cast<std::string>(), t[2].cast<std::string>(),
                     t[3].cast<std::size_t>(), t[4].cast<std::string>(), t[5].cast<double>()});
    }
  } catch (const py::error_already_set& e) {
    throw std::runtime_error(std::string("baton._debug.sessions() failed: ") + e.what());
  }
  return out;
}

detail::DebugOutput exchange(std::uint64_t id, const std::string& line, bool send, int wait_ms) {
  if (Py_IsInitialized() == 0) return {"", "gone"};
  const Gil gil;
  try {
    const py::tuple r = debug_module().attr("exchange")(id, line, send, wait_ms / 1000.0);
    return {r[0].cast<std::string>(), r[1].cast<std::string>()};
  } catch (const py::error_already_set& e) {
    throw std::runtime_error(std::string("baton._debug.exchange() failed: ") + e.what());
  }
}

void quit_all() {
  if (Py_IsInitialized() == 0) return;
  const Gil gil;
  try {
    debug_module().attr("quit_all")();
  } catch (const py::error_already_set& e) {
    detail::log_error("baton._debug.quit_all() failed: {}", e.what());
  }
}

}  // namespace

void init_debug(py::module_& m) {
  detail::set_debugger({&sessions, &exchange, &quit_all});
  py::class_<BlockingRegion>(m, "BlockingRegion")
      .def(py::init<const std::string&>())
      .def("release", &BlockingRegion::release);
}

}  // namespace baton::python
