// SlurmJob: nodes from Slurm. One `srun` owns the allocation and runs a baton-host on each
// node (copied there by --bcast); the job's credentials go to every agent over srun's standard
// input (--input=all); each agent's first line, labelled with its task number, says where it
// serves. srun's own words are kept for the errors and passed on to this program's stderr.

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "baton/launch/job.hpp"
#include "host/credentials.hpp"
#include "host/hosts.hpp"
#include "host/runtime_impl.hpp"
#include "launch/command.hpp"
#include "log/log.hpp"

namespace baton::job {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kSlurm = "Slurm's client commands (Debian: slurm-client)";

/// What to do about an error srun gave, in Slurm's own words `said`.
std::string advice(const std::string& said) {
  if (said.find("partition") != std::string::npos) {
    return "set the job's partition option to one of this cluster's partitions (see `sinfo -s`)";
  }
  if (said.find("configuration is not available") != std::string::npos ||
      said.find("More processors requested") != std::string::npos ||
      said.find("Node count specification invalid") != std::string::npos) {
    return "ask for no more nodes or GPUs than a partition has (`sinfo -N -l` shows them)";
  }
  if (said.find("account") != std::string::npos || said.find("Account") != std::string::npos) {
    return "give an account you may use: SlurmOptions::srun_args {\"--account=NAME\"} "
           "(`sacctmgr show assoc user=$USER`)";
  }
  if (said.find("time limit") != std::string::npos) {
    return "ask for a shorter time (SlurmOptions::time) than the partition's limit (`sinfo -s`)";
  }
  return "check SlurmOptions against what `sinfo` shows, and Slurm's words above";
}

/// A name no other job has: how this job is found in squeue and cancelled before srun knows
/// its id.
std::string job_name() {
  std::random_device random;
  char text[64];
  std::snprintf(text, sizeof text, "baton-%d-%08x", static_cast<int>(::getpid()), random());
  return text;
}

}  // namespace

struct SlurmJob::Allocation {
  std::string name;
  std::string id;
  pid_t srun = -1;
  int status = 0;  // srun's, once reaped
  std::thread reader;

  std::mutex mu;
  std::condition_variable changed;
  std::map<int, std::string> addresses;  // by task (node) number
  std::string said;                      // srun's stderr (its tail)
  bool ended = false;                    // srun's output is over: it has exited
  bool quiet = false;                    // cancelling: srun's words are not passed on

  /// Reads srun's stdout (the agents' first lines) and stderr (passed on) until both close.
  void read(int out, int err) {
    std::string lines[2];
    pollfd fds[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
    int open = 2;
    char buf[4096];
    while (open > 0) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
          continue;
        }
        lines[i].append(buf, static_cast<std::size_t>(n));
        for (std::size_t eol; (eol = lines[i].find('\n')) != std::string::npos;) {
          line(i, lines[i].substr(0, eol));
          lines[i].erase(0, eol + 1);
        }
      }
    }
    std::lock_guard lock(mu);
    ended = true;
    changed.notify_all();
  }

  /// "3: baton-host: host-10.0.0.5-7070 serving at tcp://10.0.0.5:7070" from task 3's stdout.
  void line(int stream, const std::string& text) {
    std::lock_guard lock(mu);
    if (stream == 0) {
      const auto colon = text.find(':');
      const auto at = text.find("serving at tcp://");
      if (colon != std::string::npos && at != std::string::npos) {
        try {
          addresses[std::stoi(text.substr(0, colon))] = text.substr(at + 17);
          changed.notify_all();
          return;
        } catch (const std::exception&) {  // not a task's label: passed on below
        }
      }
    } else {
      said += text + "\n";
      if (said.size() > 8192) said.erase(0, said.size() - 8192);
    }
    if (!quiet) std::fprintf(stream == 0 ? stdout : stderr, "%s\n", text.c_str());
  }

  /// scancel (by id, else by name: the job may still be queued), then srun's end, bounded.
  void cancel() {
    if (srun <= 0) return;
    bool over = false;
    {
      std::lock_guard lock(mu);
      quiet = true;
      over = ended;
    }
    const internal::Ran r =
        over ? internal::Ran{0, {}, {}}
             : internal::run_command({"scancel", id.empty() ? "--name=" + name : id}, kSlurm);
    if (!internal::succeeded(r)) {
      detail::log_warn("scancel of Slurm job {} failed: {}", id.empty() ? name : id,
                       internal::said(r));
    }
    std::unique_lock lock(mu);
    if (!changed.wait_for(lock, std::chrono::seconds(30), [&] { return ended; })) {
      ::kill(srun, SIGKILL);  // it does not end: its allocation ends with it
    }
    lock.unlock();
    if (reader.joinable()) reader.join();
    while (::waitpid(srun, &status, 0) < 0 && errno == EINTR) {
    }
    srun = -1;
  }

  /// "12 PENDING Resources": where the job stands, as squeue says it.
  std::string standing() const {
    const internal::Ran r =
        internal::run_command({"squeue", "-h", "--name=" + name, "-o", "%i %T %r"}, kSlurm);
    const std::string s = internal::said(r);
    return internal::succeeded(r) && !r.out.empty() ? s : "unknown to squeue (" + s + ")";
  }
};

SlurmJob::SlurmJob(Runtime& rt, SlurmOptions options)
    : rt_(internal::RuntimeAccess::slot(rt)), options_(std::move(options)) {
  if (options_.nodes < 1) throw UsageError("SlurmJob: nodes must be 1 or more");
  if (options_.gpus_per_node < 0) throw UsageError("SlurmJob: gpus_per_node must be 0 or more");
}

SlurmJob::~SlurmJob() {
  cancel();
}

std::string SlurmJob::id() const {
  return allocation_ ? allocation_->id : std::string();
}

void SlurmJob::cancel() {
  if (allocation_) allocation_->cancel();
}

HostMesh SlurmJob::hosts() {
  if (mesh_) return *mesh_;
  if (allocation_) throw UsageError("SlurmJob: this job was cancelled; make a new one");
  const std::string agent =
      internal::local_agent(options_.agent, "SlurmJob", "SlurmOptions::agent");
  if (::access(agent.c_str(), X_OK) != 0) {
    throw UsageError("SlurmJob: " + agent + " is not an executable baton-host");
  }
  Runtime& rt = internal::RuntimeAccess::live(rt_, "SlurmJob");
  const net::LinkOptions link = rt.link_options();
  if (!link.tls.enabled()) throw UsageError("SlurmJob: the runtime has no TLS files to send");
  const std::string credentials = internal::credentials_text(link.secret, link.tls);

  allocation_ = std::make_unique<Allocation>();
  Allocation& a = *allocation_;
  a.name = job_name();
  std::vector<std::string> argv{"srun",
                                "--job-name=" + a.name,
                                "--nodes=" + std::to_string(options_.nodes),
                                "--ntasks-per-node=1",
                                "--label",
                                "--input=all",
                                "--kill-on-bad-exit=1"};
  if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
  if (!options_.time.empty()) argv.push_back("--time=" + options_.time);
  if (options_.gpus_per_node > 0) {
    argv.push_back("--gpus-per-node=" + std::to_string(options_.gpus_per_node));
  }
  if (options_.copy_agent) argv.push_back("--bcast=/tmp/baton-host-" + a.name);
  argv.insert(argv.end(), options_.srun_args.begin(), options_.srun_args.end());
  argv.insert(argv.end(), {agent, "--once", "--credentials", "-", "--port",
                           std::to_string(options_.agent_port)});
  if (options_.copy_agent) argv.push_back("--unlink-self");
  if (!options_.interface.empty()) {
    argv.insert(argv.end(), {"--interface", options_.interface});
  } else if (const std::string me = internal::interface_address(""); !me.empty()) {
    argv.insert(argv.end(), {"--route-to", me});
  }

  const int in = internal::text_input(credentials);
  int out = -1;
  int err = -1;
  try {
    a.srun = internal::start_command(argv, in, &out, &err, kSlurm, /*own_group=*/true);
  } catch (...) {
    ::close(in);
    allocation_.reset();
    throw;
  }
  ::close(in);
  a.reader = std::thread([&a, out, err] { a.read(out, err); });

  const auto nodes = static_cast<std::size_t>(options_.nodes);
  std::unique_lock lock(a.mu);
  const bool started = a.changed.wait_until(lock, Clock::now() + options_.wait,
                                            [&] { return a.ended || a.addresses.size() == nodes; });
  if (a.ended && a.addresses.size() < nodes) {
    const std::string said = a.said.empty() ? "(srun said nothing)\n" : a.said;
    lock.unlock();
    cancel();
    throw std::runtime_error("SlurmJob: srun ended before " + std::to_string(nodes) +
                             " agent(s) started; Slurm said:\n" + said +
                             "What to do: " + advice(said));
  }
  if (!started) {
    lock.unlock();
    const std::string standing = a.standing();
    cancel();
    throw std::runtime_error(
        "SlurmJob: no nodes after " + std::to_string(options_.wait.count()) +
        " s: squeue says job " + standing +
        "; it was cancelled. Ask for fewer nodes, another partition or a shorter time, or wait "
        "longer (SlurmOptions::wait)");
  }
  std::vector<std::string> addresses;
  addresses.reserve(nodes);
  for (const auto& [task, address] : a.addresses) addresses.push_back(address);
  lock.unlock();
  const internal::Ran r =
      internal::run_command({"squeue", "-h", "--name=" + a.name, "-o", "%i"}, kSlurm);
  a.id = r.out.substr(0, r.out.find('\n'));
  try {
    mesh_ = internal::attach_hosts(rt, addresses);
  } catch (...) {
    cancel();
    throw;
  }
  return *mesh_;
}

}  // namespace baton::job
