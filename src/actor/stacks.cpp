// The stacks of every thread of this process (see stacks.hpp). A signal asks one thread at a
// time for its return addresses (glibc's backtrace, in the thread's own signal handler); the
// asking thread names them with libdwfl, which reads the symbol and line tables of every module
// the process maps. A signal handler and an interpreter are the process's, not a runtime's: the
// state here is the process's too.

#include "actor/stacks.hpp"

#include <cxxabi.h>
#include <dirent.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "baton/actor/errors.hpp"

namespace baton::detail {

namespace {

constexpr int kMaxFrames = 64;
// Frames of the handler itself and of the kernel's signal return, above the interrupted one.
constexpr int kHandlerFrames = 2;

// The one request in flight: asked (1) → the thread writes (2) → written (3), or abandoned (4)
// by an asker that stopped waiting before the thread began.
enum : int { kIdle = 0, kAsked = 1, kWriting = 2, kWritten = 3, kAbandoned = 4 };
struct Request {
  std::atomic<int> state{kIdle};
  std::atomic<int> tid{0};
  void* frames[kMaxFrames] = {};
  int depth = 0;
  sem_t written;
};

Request& request() {
  static Request* r = [] {
    auto* fresh = new Request;  // never freed: a late signal may still look at it
    ::sem_init(&fresh->written, 0, 0);
    return fresh;
  }();
  return *r;
}

int stack_signal() {
  return SIGRTMIN + 7;  // glibc keeps the first real-time signals below SIGRTMIN
}

void on_stack_signal(int, siginfo_t*, void*) {
  const int saved = errno;
  Request& r = request();
  int asked = kAsked;
  if (r.tid.load() == static_cast<int>(::syscall(SYS_gettid)) &&
      r.state.compare_exchange_strong(asked, kWriting)) {
    r.depth = ::backtrace(r.frames, kMaxFrames);
    r.state.store(kWritten);
    ::sem_post(&r.written);
  }
  errno = saved;
}

std::mutex& capture_mu() {
  static std::mutex mu;
  return mu;
}

struct PythonHook {
  std::mutex mu;
  PythonStacks hook;
};
PythonHook& python_hook() {
  static PythonHook h;
  return h;
}

/// Installs the handler once; false if another handler owns the signal.
bool install_handler() {
  static const bool installed = [] {
    void* warm[2];
    ::backtrace(warm, 2);  // its first call loads libgcc's unwinder: not in a signal handler
    struct sigaction old {};
    if (::sigaction(stack_signal(), nullptr, &old) != 0) return false;
    if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler != SIG_DFL) return false;
    if ((old.sa_flags & SA_SIGINFO) != 0 && old.sa_sigaction != on_stack_signal) return false;
    struct sigaction sa {};
    sa.sa_sigaction = on_stack_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    ::sigemptyset(&sa.sa_mask);
    return ::sigaction(stack_signal(), &sa, nullptr) == 0;
  }();
  return installed;
}

std::string thread_name(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

std::vector<int> thread_ids() {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

/// Names addresses with the process's own symbols and line tables.
class Symbolizer {
 public:
  Symbolizer() {
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo,
                                             nullptr, &debuginfo_path};
    dwfl_ = dwfl_begin(&callbacks);
    if (dwfl_ != nullptr) {
      dwfl_report_begin(dwfl_);
      dwfl_linux_proc_report(dwfl_, ::getpid());
      dwfl_report_end(dwfl_, nullptr, nullptr);
    }
  }
  ~Symbolizer() {
    if (dwfl_ != nullptr) dwfl_end(dwfl_);
  }
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  /// The frames at `pc`, innermost first: the functions inlined there, then the one they are
  /// in. `pc` is a return address unless `interrupted` (the frame a signal stopped).
  std::vector<std::string> frames(std::uintptr_t pc, bool interrupted) {
    const Dwarf_Addr at = interrupted ? pc : pc - 1;  // the call, not what follows it
    Dwfl_Module* mod = dwfl_ != nullptr ? dwfl_addrmodule(dwfl_, at) : nullptr;
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(pc));
    if (mod == nullptr) return {hex};
    const char* module_name =
        dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    std::string module = module_name != nullptr ? module_name : "?";
    module = module.substr(module.rfind('/') + 1);
    GElf_Off offset = 0;
    GElf_Sym sym;
    const char* symbol = dwfl_module_addrinfo(mod, at, &offset, &sym, nullptr, nullptr, nullptr);
    // The line at `at`, then the call site of each inlined function, outwards.
    std::string file;
    int line = 0;
    if (Dwfl_Line* l = dwfl_module_getsrc(mod, at)) {
      if (const char* f = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr)) file = f;
    }
    std::vector<std::string> out;
    Dwarf_Addr bias = 0;
    Dwarf_Die* cu = dwfl_module_addrdie(mod, at, &bias);
    Dwarf_Die* scopes = nullptr;
    int n = cu != nullptr ? dwarf_getscopes(cu, at - bias, &scopes) : 0;
    if (n > 0) {
      // Past an inlined function, dwarf_getscopes goes on with its abstract definition's
      // scopes; the chain of what contains the inlined copy comes from the innermost DIE.
      Dwarf_Die innermost = scopes[0];
      std::free(scopes);
      scopes = nullptr;
      n = dwarf_getscopes_die(&innermost, &scopes);
    }
    Dwarf_Files* files = nullptr;
    std::size_t nfiles = 0;
    if (n > 0 && dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = nullptr;
    for (int i = 0; i < n; ++i) {
      if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
      out.push_back(with_place(die_name(&scopes[i]), file, line));
      Dwarf_Attribute attr;
      Dwarf_Word call_file = 0;
      Dwarf_Word call_line = 0;
      dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &call_file);
      dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &call_line);
      const char* f = files != nullptr && call_file < nfiles
                          ? dwarf_filesrc(files, call_file, nullptr, nullptr)
                          : nullptr;
      file = f != nullptr ? f : "";
      line = static_cast<int>(call_line);
    }
    std::free(scopes);
    std::string name = symbol != nullptr ? demangle(symbol) : std::string(hex);
    if (!file.empty() && line > 0) {
      out.push_back(with_place(name, file, line));
    } else {
      char off[32];
      std::snprintf(off, sizeof off, "+0x%lx", static_cast<unsigned long>(offset));
      out.push_back(name + (symbol != nullptr ? off : "") + " (" + module + ")");
    }
    return out;
  }

 private:
  static std::string with_place(const std::string& name, const std::string& file, int line) {
    if (file.empty() || line <= 0) return name;
    return name + " (" + file.substr(file.rfind('/') + 1) + ":" + std::to_string(line) + ")";
  }
  /// An inlined function's name: its linkage name demangled, else its plain name.
  static std::string die_name(Dwarf_Die* die) {
    Dwarf_Attribute attr;
    const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (linkage != nullptr) {
      std::string readable = demangle(linkage);
      if (readable != linkage) return readable;
    }
    const char* plain = dwarf_diename(die);  // a lambda's call operator, say, has no other
    return plain != nullptr ? plain : linkage != nullptr ? linkage : "?";
  }
  static std::string demangle(const char* symbol) {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> readable(
        abi::__cxa_demangle(symbol, nullptr, nullptr, &status), &std::free);
    return status == 0 && readable ? std::string(readable.get()) : std::string(symbol);
  }
  Dwfl* dwfl_ = nullptr;
};

std::vector<std::string> name_frames(Symbolizer& names, void* const* frames, int depth,
                                     bool first_interrupted) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(std::max(depth, 0)));
  for (int i = 0; i < depth; ++i) {
    for (auto& f :
         names.frames(reinterpret_cast<std::uintptr_t>(frames[i]), first_interrupted && i == 0)) {
      out.push_back(std::move(f));
    }
  }
  return out;
}

/// Asks thread `tid` for its return addresses; false if it did not answer in `wait`.
bool ask(int tid, std::chrono::milliseconds wait, void** frames, int& depth) {
  Request& r = request();
  r.tid.store(tid);
  r.state.store(kAsked);
  if (::syscall(SYS_tgkill, ::getpid(), tid, stack_signal()) != 0) {
    r.state.store(kIdle);
    r.tid.store(0);
    return false;
  }
  timespec until{};
  ::clock_gettime(CLOCK_REALTIME, &until);
  const auto ns = until.tv_nsec + std::chrono::nanoseconds(wait).count();
  until.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  until.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  bool written = false;
  while (true) {
    if (::sem_timedwait(&r.written, &until) == 0) {
      written = true;
      break;
    }
    if (errno == EINTR) continue;
    int asked = kAsked;
    if (r.state.compare_exchange_strong(asked, kAbandoned)) break;  // it never began
    // It began writing just now: it ends soon.
    while (::sem_wait(&r.written) != 0) {
    }
    written = true;
    break;
  }
  if (written) {
    depth = std::max(0, r.depth - kHandlerFrames);
    std::copy(r.frames + kHandlerFrames, r.frames + kHandlerFrames + depth, frames);
  }
  r.tid.store(0);
  r.state.store(kIdle);
  return written;
}

/// The Python stacks, asked for on a thread of their own: an interpreter whose lock some
/// native code keeps would otherwise hold the asker too.
std::map<int, std::vector<std::string>> python_stacks(std::string& note) {
  PythonStacks hook;
  {
    std::lock_guard lock(python_hook().mu);
    hook = python_hook().hook;
  }
  if (!hook) return {};
  auto result = std::make_shared<std::promise<std::map<int, std::vector<std::string>>>>();
  auto got = result->get_future();
  std::thread([hook = std::move(hook), result] {
    try {
      result->set_value(hook());
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (got.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    note = "no Python stacks: the interpreter's lock was not let go of in 2 s";
    return {};
  }
  try {
    return got.get();
  } catch (const std::exception& e) {
    note = std::string("no Python stacks: ") + e.what();
    return {};
  }
}

}  // namespace

int this_thread_id() {
  thread_local const int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

void set_python_stacks(PythonStacks hook) {
  std::lock_guard lock(python_hook().mu);
  python_hook().hook = std::move(hook);
}

std::vector<std::string> this_thread_stack(int skip) {
  void* frames[kMaxFrames];
  const int depth = ::backtrace(frames, kMaxFrames);
  const int from = std::min(depth, skip + 1);  // this function's own frame too
  Symbolizer names;
  return name_frames(names, frames + from, depth - from, false);
}

std::vector<ThreadStack> thread_stacks(std::chrono::milliseconds per_thread,
                                       const std::function<void()>& captured) {
  std::string python_note;
  auto python = python_stacks(python_note);
  std::lock_guard lock(capture_mu());
  const bool can_ask = install_handler();
  const int self = this_thread_id();
  struct Raw {
    ThreadStack stack;
    void* frames[kMaxFrames];
    int depth = 0;
    bool interrupted = true;
  };
  std::vector<std::unique_ptr<Raw>> raw;
  for (const int tid : thread_ids()) {
    auto r = std::make_unique<Raw>();
    r->stack.tid = tid;
    r->stack.name = thread_name(tid);
    if (tid == self) {
      r->depth = ::backtrace(r->frames, kMaxFrames);
      r->interrupted = false;
      r->stack.note = "the thread that took these stacks";
    } else if (!can_ask) {
      r->stack.note = "no native stack: another handler owns signal SIGRTMIN+7";
    } else if (!ask(tid, per_thread, r->frames, r->depth)) {
      r->stack.note = "no native stack: the thread did not answer in " +
                      std::to_string(per_thread.count()) + " ms (it blocks signals, or ended)";
    }
    raw.push_back(std::move(r));
  }
  if (captured) captured();
  Symbolizer names;  // after the capture: reading line tables takes a while
  std::vector<ThreadStack> out;
  out.reserve(raw.size());
  for (auto& r : raw) {
    r->stack.native = name_frames(names, r->frames, r->depth, r->interrupted);
    if (auto it = python.find(r->stack.tid); it != python.end()) {
      r->stack.python = std::move(it->second);
    }
    if (!python_note.empty() && r->stack.tid == ::getpid()) r->stack.note = python_note;
    out.push_back(std::move(r->stack));
  }
  return out;
}

}  // namespace baton::detail
