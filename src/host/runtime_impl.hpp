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
// What only some of them use has a header of its own: credentials.hpp, job_dir.hpp (the job's
// directory and signals), children.hpp (spawner and child watcher), proc_group.hpp.

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
#include "host/admin.hpp"
#include "host/children.hpp"
#include "host/credentials.hpp"
#include "host/job_dir.hpp"
#include "host/proc_group.hpp"
#include "mesh/stall.hpp"
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
  /// The state of the runtime whose node `proc` belongs to: how the runtime's own actors
  /// (HostAgent, HostClient) reach it, through the proc they run in. Throws UsageError once
  /// that runtime is gone.
  static State& state(Proc& proc);
  /// What a handle that outlives its runtime keeps of it (a HostMesh, a job).
  static std::shared_ptr<RuntimeSlot> slot(Runtime& rt);
  /// The runtime `slot` names; throws UsageError, naming `what`, once it is gone.
  static Runtime& live(const std::shared_ptr<RuntimeSlot>& slot, std::string_view what);
};
using RuntimeState = RuntimeAccess::State;

/// Where the node keeps the runtime of this process (Runtime::get()), set once it is ready.
struct RuntimeSlot {
  std::atomic<Runtime*> runtime{nullptr};
};

/// One future for several: completes once all have, failing with the first failure.
Future<void> all_of(const std::vector<Future<void>>& parts);
/// The same over futures of any type, by their states (read each one's value once it is done).
Future<void> all_of(const std::vector<std::shared_ptr<detail::StateBase>>& parts);

/// Runs jobs at given times (deadlines that nothing else would wake up for: a worker that never
/// links), on one thread started by the first job; a job must not block.
using Timers = net::TimerQueue;

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
    bool exited = false;               // its process is gone (whatever the report)
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
  /// The controller's admin API (null in workers, or with BATON_ADMIN=off), and what it shows.
  std::unique_ptr<internal::AdminServer> admin;
  /// How long an endpoint runs before it is logged as a stall (BATON_STALL_AFTER; none: never),
  /// and what watches for it in this process's proc.
  std::optional<std::chrono::milliseconds> stall_after;
  std::unique_ptr<detail::StallWatch> stall_watch;
  void start_stall_watch() {
    if (stall_after && detail::observing()) {
      stall_watch = std::make_unique<detail::StallWatch>(*proc, *stall_after);
    }
  }
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::deque<std::string> failures;  // that reached the controller's hook, newest last (under mu)
  static constexpr std::size_t kFailuresKept = 1000;
  /// What the admin API shows now; with `with_actors`, each running proc is asked for its
  /// actors (up to 2 s each, all at once).
  internal::AdminSnapshot admin_snapshot(bool with_actors);
  /// What the admin API reads and does (inspect.cpp).
  internal::AdminSource admin_source();
  std::vector<internal::AdminStacks> admin_stacks(const std::string& proc,
                                                  const std::string& actor);
  std::vector<internal::AdminLogLine> admin_logs(const std::string& proc, const std::string& level,
                                                 std::size_t lines, std::uint64_t since);
  std::string admin_kill(const std::string& proc);
  /// The Python actors paused in breakpoint() across the job, and one exchange with one
  /// (debug.cpp).
  std::vector<internal::AdminDebugSession> admin_debug_sessions();
  detail::DebugOutput admin_debug_io(const std::string& proc, std::uint64_t session,
                                     const std::string& line, bool send);
  std::vector<std::pair<std::string, detail::ProcMetrics>> admin_metrics();
  /// Starts a trace in every process of the job, or stops it and gathers it (Chrome's format).
  void trace_start();
  std::string trace_stop(const std::vector<std::string>& parts = {});
  /// BATON_TRACE: where the trace of the whole run goes when the runtime ends ("" : none).
  std::string trace_file;
  void write_trace();
  void write_trace_part();

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
