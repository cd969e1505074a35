#pragma once

// Internal: what the files of the runtime share. Its parts live in files of their own:
//   runtime.cpp   the Runtime object: making it (controller or worker), the controller's
//                 supervise hook, destroying it
//   job_dir.cpp   the job's directory (and removing those of dead controllers), SIGINT/SIGTERM
//   children.cpp  starting processes (the spawner thread), reaping them (the child watcher,
//                 oom_kill counts), what a worker's death means to its mesh
//   worker.cpp    a worker's side: bootstrap from the environment, serving its proc
//   start.cpp     HostMesh::spawn_procs_async: workers starting until they link, their deadline
//   procs.cpp     the proc groups' orderly stop, HostMesh::stop

#include <signal.h>
#include <spawn.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actor/node.hpp"
#include "baton/host/runtime.hpp"
#include "net/work_queue.hpp"

namespace baton {
namespace internal {

using namespace std::chrono_literals;

// Bootstrap variables: how a worker learns who it is and where its controller listens.
constexpr const char* kProcVar = "BATON_PROC";
constexpr const char* kControllerVar = "BATON_CONTROLLER";
constexpr const char* kControllerAddrVar = "BATON_CONTROLLER_ADDR";
constexpr const char* kParentVar = "BATON_PARENT_PID";
constexpr const char* kDirVar = "BATON_DIR";  // where the job's sockets live
// The port of the spawning proc to which a worker sends one value once it has linked: the
// news that it is up, which completes spawn_procs_async without a thread waiting for it. The
// value is the address the worker serves at.
constexpr const char* kReadyVar = "BATON_READY_PORT";
// Set for workers that other hosts must reach: the worker serves TCP on this host (any port)
// instead of a unix socket in the job's directory.
constexpr const char* kServeHostVar = "BATON_SERVE_HOST";
// The job's secret: every link proves it holds it (net::LinkOptions::secret). It travels in
// the environment, never on a command line, and a worker removes it from its own environment.
constexpr const char* kSecretVar = "BATON_JOB_SECRET";
// TLS for links that leave the host: the job's certificate, key and CA (PEM files). Set by
// the user to bring their own; otherwise the controller makes a CA and certificate per job.
constexpr const char* kTlsCertVar = "BATON_TLS_CERT";
constexpr const char* kTlsKeyVar = "BATON_TLS_KEY";
constexpr const char* kTlsCaVar = "BATON_TLS_CA";

// A directory with the job's secret and TLS files (see Credentials): for a controller whose
// hosts' agents were started by other means, which must share them.
constexpr const char* kCredentialsVar = "BATON_CREDENTIALS";

constexpr auto kStartTimeout = 30s;
// After a stop, how long the link of a process that exited may take to close.
constexpr auto kUnlinkWait = 2s;
// How long a stop waits for a process to go after SIGKILL before it gives up on it (a process
// in an uninterruptible wait in the kernel outlives SIGKILL). Generous: on a loaded machine a
// large process was seen to take over 10 s to exit after SIGKILL.
constexpr auto kKillWait = 60s;

/// The runtime's state, for the host layer's own code (it is private to users).
struct RuntimeAccess {
  using State = Runtime::State;
  static State& state(Runtime& rt) { return *rt.state_; }
};
using RuntimeState = RuntimeAccess::State;

/// Where the node keeps the runtime of this process (Runtime::get()), set once it is ready.
struct RuntimeSlot {
  std::atomic<Runtime*> runtime{nullptr};
};

/// A job's secret and TLS files, kept in a directory only their owner may read: "secret",
/// "ca.pem", "cert.pem", "key.pem". How an agent started by a scheduler gets them: the
/// directory is named by --credentials or BATON_CREDENTIALS, never passed on a command line.
struct Credentials {
  std::string secret;
  net::TlsOptions tls;
};
/// Makes `dir` (mode 0700) with a fresh secret and a CA and certificate (files mode 0600).
Credentials make_credentials(const std::filesystem::path& dir);
/// Reads `dir`; throws UsageError naming what is missing or readable by others.
Credentials load_credentials(const std::filesystem::path& dir);
/// The job's credentials as one text, for an agent's standard input (`baton-host --credentials
/// -`): how a job that starts agents through a pipe (srun, ssh) hands them over, never on a
/// command line. Throws UsageError if the TLS files cannot be read.
std::string credentials_text(const std::string& secret, const net::TlsOptions& tls);
/// Reads credentials_text() from `fd` to its end and writes it to `dir` (made, mode 0700;
/// files 0600), then loads them; throws UsageError saying what was wrong with the text.
Credentials receive_credentials(int fd, const std::filesystem::path& dir);
/// Reads credentials_text() from the file `text` (only its owner may read it: a Kubernetes
/// Secret mounted with mode 0400, say) and writes it to `dir` as receive_credentials() does.
Credentials read_credentials_file(const std::filesystem::path& text,
                                  const std::filesystem::path& dir);

/// Makes the job's directory (only this user may enter it) and records who made it.
std::filesystem::path make_job_dir();
/// Removes the directory tree at `path`; false if some of it stayed. Not
/// std::filesystem::remove_all: a library loaded beside the runtime may export its own copy of
/// that symbol, built against another libstdc++ (PyTorch's pip wheels do, and a call through it
/// crashed).
bool remove_tree(const std::string& path);

/// "SIGINT".
std::string signal_name(int sig);

/// One future for several: completes once all have, failing with the first failure.
Future<void> all_of(const std::vector<Future<void>>& parts);
/// The same over futures of any type, by their states (read each one's value once it is done).
Future<void> all_of(const std::vector<std::shared_ptr<detail::StateBase>>& parts);

/// Turns SIGINT and SIGTERM into calls on a thread of its own: the first signal runs `first`
/// (on one more thread, so that a second signal is heard while it runs), later ones `again`.
/// Both end the process. The handlers that were there before come back when it is destroyed.
class StopSignals {
 public:
  StopSignals(std::function<void(int)> first, std::function<void(int)> again);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void run();

  std::function<void(int)> first_;
  std::function<void(int)> again_;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  std::thread thread_;
  std::thread stopping_;
};

/// Starts processes from one thread that lives as long as the runtime. A worker's
/// PR_SET_PDEATHSIG follows the thread that started it, not the process: started from a
/// short-lived thread, it would die when that thread ends.
class Spawner {
 public:
  Spawner();
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  /// posix_spawn, run on the spawner's thread.
  int spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
            char* const argv[], char* const envp[]);

 private:
  struct Job {
    std::function<int()> start;
    int rc = 0;
    bool done = false;
  };

  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> jobs_;
  bool quit_ = false;
  std::thread thread_;
};

/// Reaps child processes as they exit, on a thread of its own: one poll over their pidfds.
/// A child killed by SIGKILL is said to be the out-of-memory killer's only if the kernel's
/// count of such kills in the child's cgroup rose since it was last read.
class ChildWatcher {
 public:
  using OnExit = std::function<void(pid_t pid, const std::string& what)>;

  explicit ChildWatcher(OnExit on_exit);
  ~ChildWatcher();
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  void add(pid_t pid);

  /// Sends `sig` to every child still running (through its pidfd: never to a reused pid).
  void signal_all(int sig);

  /// What became of `pid` once it exited, waiting until `deadline`; nullopt if still running.
  std::optional<std::string> wait(pid_t pid, std::chrono::steady_clock::time_point deadline);

  /// Forgets what became of `pid` (its group is gone).
  void forget(pid_t pid);

 private:
  void poke() const;
  void run();
  /// Whether the out-of-memory killer acted in `pid`'s cgroup since its count was last read.
  bool oom_killed(pid_t pid);

  OnExit on_exit_;
  int wake_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<pid_t, int> running_;  // pidfd of each child still running
  std::unordered_map<pid_t, std::string> exited_;
  std::unordered_map<pid_t, std::string> oom_file_;          // each running child's events file
  std::unordered_map<std::string, std::uint64_t> oom_seen_;  // oom_kill count last read, by file
  bool quit_ = false;
  std::thread thread_;
};

/// Runs jobs at given times (deadlines that nothing else would wake up for: a worker that never
/// links), on one thread started by the first job; a job must not block.
using Timers = net::TimerQueue;

/// Runs the orderly stops of proc groups one after another, on a thread that lives as long as
/// the runtime, so that stop() returns its future at once; what is still queued runs before the
/// runtime goes. (on_this_thread(): a continuation of a stop's future runs there.)
using StopWorker = net::JobQueue;

/// Worker processes started by one spawn_procs call.
class LocalProcGroup final : public detail::ProcGroup,
                             public std::enable_shared_from_this<LocalProcGroup> {
 public:
  /// `gone` runs once every process has exited, to let go of what was theirs.
  LocalProcGroup(ChildWatcher& watcher, StopWorker& stops, std::chrono::milliseconds grace,
                 std::function<void(const std::vector<ProcId>&)> gone)
      : watcher_(watcher), stops_(stops), grace_(grace), gone_(std::move(gone)) {}
  ~LocalProcGroup() override { stop_here(grace_); }

  /// Set before the group's processes are told to stop, so their exits read as stops.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);

  /// False, adding nothing, once the group began to stop: the caller must kill `pid` itself.
  bool add(pid_t pid, ProcId name) {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::idle) return false;
    children_.push_back({pid, std::move(name)});
    return true;
  }

  std::chrono::milliseconds default_grace() const override { return grace_; }
  std::shared_ptr<std::atomic<bool>> stopped_flag() const override { return stopping; }

  /// Queues the stop on the runtime's stop thread (runs it at once when called there) and
  /// returns its future; every call returns the future of the first.
  Future<void> stop(std::chrono::milliseconds grace) override;
  /// Runs the stop on the calling thread, unless it already runs elsewhere, and returns once
  /// it is over: for the runtime's own paths that must wait (its end, a signal, a proc's
  /// shutdown, a failed spawn).
  void stop_here(std::chrono::milliseconds grace);

 private:
  enum class Phase { idle, queued, running, done };
  struct Child {
    pid_t pid;
    ProcId name;
  };
  /// The queued stop, unless another caller took it over.
  void run_queued(std::chrono::milliseconds grace);
  /// The orderly stop itself; completes `done_`.
  void run(std::chrono::milliseconds grace);

  ChildWatcher& watcher_;
  StopWorker& stops_;
  const std::chrono::milliseconds grace_;
  std::function<void(const std::vector<ProcId>&)> gone_;
  std::mutex mu_;
  Phase phase_ = Phase::idle;
  Promise<void> done_;
  std::vector<Child> children_;
};

class ProcStart;

/// One host of a job: where its agent serves, the agent's proc, and whether it was lost.
struct RemoteHost {
  Address address;
  ProcId agent;
  std::shared_ptr<std::atomic<bool>> lost = std::make_shared<std::atomic<bool>>(false);
};

/// How one spawn starts its workers; every field has a default that starts this program on
/// this host for the caller, as HostMesh::spawn_procs does.
struct LaunchSpec {
  std::string mesh;                              // the procs' names' stem; empty: the next procsN
  std::string executable = "/proc/self/exe";     // what each worker runs
  std::optional<std::vector<std::string>> args;  // its argv[1..]; default: this process's
  std::optional<std::vector<std::string>> env;   // its environment; default: this process's
  std::string serve_host;        // workers listen on TCP on this host; empty: on unix sockets
  std::optional<ActorId> owner;  // who hears of the procs' failures; default: the caller
  /// A controller's host client (agent mode): the procs' exits and output go there, and that
  /// controller reports them to their owners.
  std::optional<ActorId> report_to;
};

}  // namespace internal

struct Runtime::State {
  // What this process's procs share; held first, released last.
  std::shared_ptr<detail::Node> node = detail::Node::acquire();
  struct Child {
    pid_t pid;
    std::string mesh;
    std::size_t rank;
    std::shared_ptr<std::atomic<bool>> stopping;  // its group is being stopped on purpose
    ActorId owner;                                // who hears of its death
    std::optional<std::string> report;            // once it died
    bool started = false;              // linked: a death before is a failed spawn, not a failure
    std::optional<ActorId> report_to;  // agent mode: the controller's host client
    std::string host;                  // on another host: its agent's proc name
  };

  std::once_flag own_agent;  // this_proc(): the agent that spawns actors in this process's proc

  /// Whether the runtime still stands, for handles that may outlive it (a proc mesh on other
  /// hosts dropped after the runtime closed, at a program's exit): they take `mu` and do
  /// nothing once `alive` is false.
  struct Life {
    std::mutex mu;
    bool alive = true;
  };
  std::shared_ptr<Life> life = std::make_shared<Life>();

  std::mutex children_mu;
  std::condition_variable children_cv;
  std::unordered_map<std::string, Child> children;  // by proc name
  std::unordered_map<pid_t, std::string> names;     // proc name by pid
  std::vector<std::string> argv;
  std::unique_ptr<OutputForwarder> output;
  std::filesystem::path dir;
  bool own_dir = false;
  std::unique_ptr<Proc> proc;
  Address address;
  std::string prefix;            // of this process's mesh names: empty in the controller
  std::string secret;            // the job's, shared by every proc of the job
  std::string credentials_from;  // where the controller's secret came from, for its errors
  std::chrono::milliseconds stop_grace{5000};
  std::chrono::milliseconds exit_wait{2000};
  /// The program ends on a second signal: it kills the job's processes, whose loss is then no
  /// failure to report (nor a reason to end with another status).
  std::atomic<bool> killing{false};
  net::LinkOptions link;
  std::size_t mailbox_limit = 10000;
  std::mutex mu;
  std::size_t next_mesh = 0;
  std::vector<std::weak_ptr<internal::LocalProcGroup>> groups;
  std::function<bool(const MeshFailure&)> supervise;  // under mu
  /// What the message of a failure nothing handled says to do, in the program's own terms (a
  /// Python program's hooks are not the C++ ones). Set before any failure can come.
  std::string unhandled_hint =
      "an owner may handle failures in Actor::supervise, the controller in "
      "RuntimeOptions::supervise";
  /// Runs just before this program ends at once (a failure nothing handled, a signal that stops
  /// the job): what it must not lose, such as an interpreter's buffered output. Set before any
  /// failure can come; bounded in time by whoever sets it.
  std::function<void()> before_exit;
  /// A host language's own Ctrl-C (the first SIGINT): true if it took it, raising in its main
  /// thread so that the program unwinds and stops the job on its way out (Python's
  /// KeyboardInterrupt); a second SIGINT still kills the job at once. Set before the signal.
  std::function<bool()> on_interrupt;
  std::unique_ptr<internal::ChildWatcher> watcher;
  std::unique_ptr<internal::Spawner> spawner;
  std::unique_ptr<internal::StopWorker> stops;  // where proc groups stop
  std::unique_ptr<internal::Timers> timers;     // start-up deadlines
  // spawn_procs_async calls whose workers are not all up yet, by pid (under children_mu).
  std::unordered_map<pid_t, std::shared_ptr<internal::ProcStart>> starting;
  std::unique_ptr<internal::StopSignals> signals;  // the controller's

  /// Starts the workers of one proc mesh; the future completes once all have linked.
  Future<ProcMesh> spawn(const Shape& shape, const internal::LaunchSpec& spec);
  /// A proc of ours is gone (`report` says how): later calls to it fail at once, and the
  /// owner of each actor mesh with a member there (else of the proc mesh) hears of it; for a
  /// proc an agent started for a controller, that controller's HostClient does.
  void report_exit(const std::string& name, const Child& child, const std::string& report);
  /// Where the output of `mesh` goes instead of this process's sink (agent mode).
  std::unordered_map<std::string, ActorId> output_to;  // under mu
  /// Meshes whose output is not printed here (kept for failure reports); "" stands for all.
  std::unordered_set<std::string> output_hidden;  // under mu
  /// This program as it ships to other hosts: its path, SHA-256 and size (found on first use).
  struct Program {
    std::string path;
    std::string hash;
    std::uint64_t size = 0;
  };
  std::optional<Program> program;  // under mu
  /// The hosts of jobs this controller attached to, by their agents' proc names (under mu).
  std::unordered_map<std::string, internal::RemoteHost> remote_hosts;
  /// Runs when the link to a proc closes for good, before anything else hears of it (agent
  /// mode: a controller gone); must not block.
  std::function<void(const std::string& peer)> peer_lost;  // under mu

  /// Removes the job's directory (its sockets, CA and key), if this process made it.
  /// An agent's credentials that came on its standard input: removed with the job directory.
  std::filesystem::path received_credentials;
  /// Held while the job's directory is removed: a stop and a kill racing to remove it (a
  /// second signal) end the process only once one of them has removed all of it.
  std::mutex dir_mu;

  void remove_job_dir() {
    std::lock_guard lock(dir_mu);
    if (!received_credentials.empty()) (void)internal::remove_tree(received_credentials);
    if (own_dir) (void)internal::remove_tree(dir);
  }

  /// Stops every live proc group, on the calling thread where a stop has not begun yet, and
  /// returns once all are over.
  void stop_groups();
  /// Starts the stop of every live proc group; the future completes once all are over.
  Future<void> stop_groups_async();
  /// The proc groups not yet gone.
  std::vector<std::shared_ptr<internal::LocalProcGroup>> live_groups();
  /// A child exited: if its spawn_procs_async call is still waiting for it, that call fails.
  /// Before Runtime::child_exited, on the watcher's thread.
  void start_exited(pid_t pid, const std::string& what);
};

}  // namespace baton
