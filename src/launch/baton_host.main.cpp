// baton-host: the agent of one host. It serves TCP (authenticated by the job's secret, with
// TLS), and starts, watches and stops worker processes there for a controller on another host,
// sending back their output and how they end (see src/host/hosts.hpp).
//
//   baton-host --make-credentials DIR    a job's secret, CA and certificate, once, shared by
//                                        the controller (BATON_CREDENTIALS=DIR) and its agents
//   baton-host --credentials DIR --advertise 10.0.0.2 --port 7070
//
// The secret and keys are never on a command line: --credentials names a directory only its
// owner may read (BATON_CREDENTIALS works too), or is "-" for a job that starts its agents
// through a pipe (srun, ssh) and writes them to their standard input.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "baton/baton.hpp"
#include "host/hosts.hpp"
#include "host/runtime_impl.hpp"

namespace {

/// A TCP port free on `host` (an IPv4 address, else on every address), for --port 0: the
/// agent's name carries its port, so the port is chosen before the agent is named. It stays
/// bound (SO_REUSEADDR, not listening) until release(), once the agent listens on it, so no
/// other process is given it meanwhile. 0 if none could be had.
class HeldPort {
 public:
  explicit HeldPort(const std::string& host)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (fd_ < 0) return;
    const int on = 1;
    (void)::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in at{};
    at.sin_family = AF_INET;
    socklen_t len = sizeof(at);
    if (::inet_pton(AF_INET, host.c_str(), &at.sin_addr) != 1) at.sin_addr.s_addr = INADDR_ANY;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0 &&   // NOLINT
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &len) == 0) {  // NOLINT
      port_ = ntohs(at.sin_port);
    }
  }
  ~HeldPort() { release(); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  std::uint16_t port() const { return port_; }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  std::uint16_t port_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"baton-host: runs procs on this host for a baton controller on another"};
  std::string make_dir;
  std::string credentials;
  std::string advertise;
  std::string interface_name;
  std::string route_to;
  std::uint16_t port = 7070;
  std::string cache;
  bool once = false;
  bool unlink_self = false;
  app.add_option("--make-credentials", make_dir,
                 "make a job's credentials (secret, CA, certificate) in DIR and exit");
  app.add_option("--credentials", credentials,
                 "the job's credentials (or BATON_CREDENTIALS): a directory made by "
                 "--make-credentials, a file of their text form (a mounted Kubernetes Secret), "
                 "or \"-\" to read that text from standard input, as a job that starts agents "
                 "sends it (kept private while the agent runs, removed when it ends)");
  app.add_option("--advertise", advertise,
                 "the address other hosts reach this one at (or BATON_HOST_ADDRESS)");
  app.add_option("--interface", interface_name, "advertise this interface's IPv4 address");
  app.add_option("--route-to", route_to,
                 "advertise this host's address on the route to this IPv4 address (the "
                 "controller's)");
  app.add_option("--port", port, "the TCP port to serve on (0: a free one, which it prints)")
      ->capture_default_str();
  app.add_flag("--once", once,
               "serve one controller: exit, its procs stopped, once the link to the first "
               "controller that spawned here closes for good (for agents a job starts)");
  app.add_option("--cache", cache,
                 "where programs shipped by controllers are kept, by hash (default: "
                 "$XDG_CACHE_HOME/baton or ~/.cache/baton)");
  app.add_flag("--unlink-self", unlink_self,
               "remove this program's file once started (a copy made for one job, such as "
               "srun --bcast makes)");
  CLI11_PARSE(app, argc, argv);

  using namespace baton;
  try {
    if (!make_dir.empty()) {
      internal::make_credentials(make_dir);
      std::printf("baton-host: credentials in %s\n", make_dir.c_str());
      return 0;
    }
    if (cache.empty()) {
      if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
        cache = std::string(x) + "/baton";
      } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
        cache = std::string(home) + "/.cache/baton";
      } else {
        cache = "/tmp/baton-cache-" + std::to_string(::geteuid());
      }
    }
    if (credentials.empty()) {
      if (const char* c = std::getenv(internal::kCredentialsVar)) credentials = c;
    }
    if (credentials.empty()) {
      std::fprintf(stderr,
                   "baton-host: no credentials: give --credentials DIR (or BATON_CREDENTIALS), "
                   "made with `baton-host --make-credentials DIR` and shared with the "
                   "controller\n");
      return 2;
    }
    // A directory is used where it is; the text form (on standard input, or in a file such as
    // a mounted Kubernetes Secret) is written to a private directory of this agent's own.
    const bool text = credentials == "-" || std::filesystem::is_regular_file(credentials);
    std::filesystem::path received;
    if (text) {
      received = std::filesystem::path(cache) / ("credentials-" + std::to_string(::getpid()));
    }
    struct Remove {  // on the way out of main; the runtime removes it when it ends by a signal
      std::filesystem::path path;
      ~Remove() {
        if (!path.empty()) (void)internal::remove_tree(path);
      }
    } remove_received{received};
    const internal::Credentials creds =
        !text                ? internal::load_credentials(credentials)
        : credentials == "-" ? internal::receive_credentials(STDIN_FILENO, received)
                             : internal::read_credentials_file(credentials, received);
    if (unlink_self) {
      char self[PATH_MAX] = {};
      if (::readlink("/proc/self/exe", self, sizeof self - 1) > 0) ::unlink(self);
    }
    if (advertise.empty()) {
      if (const char* a = std::getenv("BATON_HOST_ADDRESS")) advertise = a;
    }
    if (advertise.empty() && !interface_name.empty()) {
      advertise = internal::interface_address(interface_name);
      if (advertise.empty()) {
        std::fprintf(stderr,
                     "baton-host: no interface %s with an IPv4 address (see `ip -4 addr`)\n",
                     interface_name.c_str());
        return 2;
      }
    }
    // Named explicitly, any address goes (a loopback one for hosts on one machine); found
    // by itself, never a loopback alias such as the 127.0.1.1 `hostname` may resolve to.
    const bool named = !advertise.empty();
    if (advertise.empty() && !route_to.empty()) advertise = internal::route_address(route_to);
    if (advertise.empty()) advertise = internal::interface_address("");
    if (advertise.empty() || (!named && advertise.starts_with("127."))) {
      std::fprintf(stderr,
                   "baton-host: no address other hosts can reach (found '%s'): give --advertise "
                   "ADDR, --interface NAME or BATON_HOST_ADDRESS\n",
                   advertise.c_str());
      return 2;
    }
    Address at;
    at.transport = Address::Transport::tcp;
    at.host = advertise;
    std::optional<HeldPort> held;
    if (port == 0) held.emplace(advertise);
    at.port = held ? held->port() : port;
    RuntimeOptions options;
    options.name = internal::agent_name(at);
    options.link.secret = creds.secret;
    options.link.tls = creds.tls;
    Runtime rt(argc, argv, options);
    internal::RuntimeAccess::state(rt).received_credentials = received;
    Address bound;
    try {
      bound = rt.proc().serve(at);
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "baton-host: cannot serve at %s: %s (give --port a free port, and "
                   "--advertise an address of this host)\n",
                   at.to_string().c_str(), e.what());
      return 2;
    }
    if (held) held->release();  // listening on it now
    rt.proc().spawn<internal::HostAgent>("host", advertise, cache, once);
    std::printf("baton-host: %s serving at %s\n", options.name.c_str(), bound.to_string().c_str());
    std::fflush(stdout);
    for (;;) ::pause();  // SIGTERM or SIGINT stops the procs in order and exits
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-host: %s\n", e.what());
    return 2;
  }
}
