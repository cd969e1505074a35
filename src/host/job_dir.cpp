#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "log/log.hpp"
#include "runtime_impl.hpp"

namespace baton {
namespace internal {

bool remove_tree(const std::string& path) {
  constexpr int kOpenDirs = 16;
  return ::nftw(
             path.c_str(),
             [](const char* p, const struct stat*, int flag, struct FTW*) {
               const int rc = flag == FTW_DP ? ::rmdir(p) : ::unlink(p);
               return rc == 0 || errno == ENOENT ? 0 : -1;  // gone already is as good
             },
             kOpenDirs, FTW_DEPTH | FTW_PHYS) == 0;
}

namespace {

// A job's directory is "baton-<controller pid>-XXXXXX" in the temporary directory, with the
// controller's pid and start time in this file: a later controller removes it if that one died.
constexpr const char* kJobDirPrefix = "baton-";
constexpr const char* kControllerFile = "controller";

/// When process `pid` started (/proc/<pid>/stat field 22): with the pid, it names one process
/// even after the pid is reused. nullopt if there is no such process.
std::optional<std::uint64_t> start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i < 22; ++i) rest >> field;  // state (3) .. cstime (21)
  std::uint64_t t = 0;
  if (!(rest >> t)) return std::nullopt;
  return t;
}

/// Whether the controller that made a job directory (its pid, and its `controller` file) lives.
bool controller_alive(pid_t pid, const std::filesystem::path& file) {
  const auto started = start_time(pid);
  if (!started) return false;
  std::ifstream in(file);
  long long recorded_pid = 0;
  std::uint64_t recorded_start = 0;
  if (!(in >> recorded_pid >> recorded_start)) return true;  // being made right now: keep it
  return recorded_pid == pid && recorded_start == *started;
}

/// Calls f(directory, controller pid) for each job directory of this user in `tmp`.
template <class F>
void each_job_dir(const std::filesystem::path& tmp, F f) {
  std::error_code ec;
  const std::string prefix = kJobDirPrefix;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto dash = name.find('-', prefix.size());
    if (dash == std::string::npos || dash == prefix.size() || dash - prefix.size() > 9) continue;
    const std::string digits = name.substr(prefix.size(), dash - prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    f(entry.path(), static_cast<pid_t>(std::stol(digits)));
  }
}

/// Removes the job directories in `tmp` of this user whose controller is dead: a controller
/// killed too hard to clean up left them, and they hold its job's key.
void remove_stale_job_dirs(const std::filesystem::path& tmp) {
  each_job_dir(tmp, [](const std::filesystem::path& dir, pid_t pid) {
    if (controller_alive(pid, dir / kControllerFile)) return;
    if (remove_tree(dir.string())) {
      detail::log_info("removed {}: its controller (pid {}) is gone", dir.string(),
                       static_cast<int>(pid));
    }
  });
}

}  // namespace

std::vector<RunningJob> running_jobs() {
  std::vector<RunningJob> out;
  each_job_dir(std::filesystem::temp_directory_path(),
               [&](const std::filesystem::path& dir, pid_t pid) {
                 if (!controller_alive(pid, dir / kControllerFile)) return;
                 RunningJob job{dir, static_cast<int>(pid), {}};
                 std::ifstream in(dir / kAdminAddressFile);
                 std::getline(in, job.admin_url);
                 out.push_back(std::move(job));
               });
  std::sort(out.begin(), out.end(),
            [](const RunningJob& a, const RunningJob& b) { return a.pid < b.pid; });
  return out;
}

/// Makes the job's directory (only this user may enter it) and records who made it.
std::filesystem::path make_job_dir() {
  const auto tmp = std::filesystem::temp_directory_path();
  remove_stale_job_dirs(tmp);
  std::string tmpl = (tmp / (kJobDirPrefix + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("cannot create a directory for the job's sockets in " + tmp.string() +
                             ": " + std::strerror(errno) + " (set TMPDIR to a writable directory)");
  }
  const std::filesystem::path dir = tmpl;
  const std::string who =
      std::to_string(::getpid()) + " " + std::to_string(start_time(::getpid()).value_or(0)) + "\n";
  const int fd =
      ::open((dir / kControllerFile).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, who.data(), who.size()) != static_cast<ssize_t>(who.size())) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    remove_tree(dir.string());
    throw std::runtime_error("cannot write " + (dir / kControllerFile).string() + ": " + why);
  }
  ::close(fd);
  return dir;
}

namespace {

// The write end of the pipe that SIGINT and SIGTERM go into: a signal handler has no other way
// to reach the runtime. -1 while no runtime listens.
std::atomic<int> g_signal_pipe{-1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const auto b = static_cast<unsigned char>(sig);
    [[maybe_unused]] const auto n = ::write(fd, &b, 1);
  }
  errno = saved;
}

}  // namespace

/// "SIGINT".
std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
}

StopSignals::StopSignals(std::function<void(int)> first, std::function<void(int)> again)
    : first_(std::move(first)), again_(std::move(again)) {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe for signals: ") +
                             std::strerror(errno));
  }
  ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);  // a handler never blocks
  int expected = -1;
  if (!g_signal_pipe.compare_exchange_strong(expected, pipe_[1])) {
    ::close(pipe_[0]);
    ::close(pipe_[1]);
    throw UsageError("only one baton::Runtime may handle SIGINT and SIGTERM in a process");
  }
  thread_ = std::thread([this] { run(); });
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  g_signal_pipe.store(-1);
  const unsigned char quit = 0;
  [[maybe_unused]] const auto n = ::write(pipe_[1], &quit, 1);
  thread_.join();
  // A stop that a signal began ends the process; this waits for it rather than race it.
  if (stopping_.joinable()) stopping_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void StopSignals::run() {
  for (;;) {
    unsigned char sig = 0;
    const auto n = ::read(pipe_[0], &sig, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || sig == 0) return;
    if (!stopping_.joinable()) {
      stopping_ = std::thread([this, sig] { first_(sig); });
    } else {
      again_(sig);
    }
  }
}

}  // namespace internal

using namespace internal;

void Runtime::stop_on_signal(int sig) {
  detail::log_warn("{}: stopping the job (send it again to kill it at once)", signal_name(sig));
  state_->stop_groups();
  state_->output->flush();
  if (state_->before_exit) state_->before_exit();
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(128 + sig);
}

void Runtime::kill_on_signal(int sig) {
  detail::log_warn("{} again: killing the job's processes", signal_name(sig));
  state_->killing.store(true);
  state_->watcher->signal_all(SIGKILL);
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(128 + sig);
}

}  // namespace baton
