// SshJob against a real OpenSSH server: sshd in a network namespace host (keys made by the
// test), reached with the test's own key. Needs root, iproute2 and openssh-server (make deps).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "host/hosts.test.hpp"
#include "host/netns.test.hpp"

namespace baton {
namespace {

using test::Member;
using ::testing::HasSubstr;

/// Runs a program to its end; throws with its stderr if it fails.
void must(const std::string& path, const std::vector<std::string>& args) {
  auto child = test::start_self_as(path, path, args, test::environment(), STDERR_FILENO);
  const std::string err = test::read_to_end(child.from);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(path + " failed: " + err);
  }
}

/// An OpenSSH server in a namespace host, accepting the test's key for this user.
class SshServer {
 public:
  SshServer(test::NetHosts& net, std::size_t host, const std::filesystem::path& dir) : dir_(dir) {
    if (::access("/usr/sbin/sshd", X_OK) != 0) {
      throw std::runtime_error(
          "no /usr/sbin/sshd (Debian's openssh-server; make deps installs it)");
    }
    must("/usr/bin/ssh-keygen",
         {"-q", "-t", "ed25519", "-N", "", "-f", (dir / "host_key").string()});
    must("/usr/bin/ssh-keygen",
         {"-q", "-t", "ed25519", "-N", "", "-f", (dir / "user_key").string()});
    std::filesystem::copy_file(dir / "user_key.pub", dir / "authorized_keys");
    std::ofstream(dir / "sshd_config")
        << "ListenAddress " << net.address(host) << "\nPort 22\nHostKey "
        << (dir / "host_key").string() << "\nAuthorizedKeysFile "
        << (dir / "authorized_keys").string()
        << "\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
           "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile "
        << (dir / "sshd.pid").string() << "\n";
    std::filesystem::create_directories("/run/sshd");  // its privilege separation directory
    child_ = test::start_self_as(test::ip_program(), "ip",
                                 {"netns", "exec", net.ns(host), "/usr/sbin/sshd", "-D", "-e", "-f",
                                  (dir / "sshd_config").string()},
                                 test::environment(), STDERR_FILENO);
    // Ready once it says it listens.
    FILE* err = ::fdopen(child_.from, "r");
    char line[512] = {};
    std::string said;
    while (std::fgets(line, sizeof line, err) != nullptr) {
      said += line;
      if (std::string(line).find("Server listening") != std::string::npos) break;
    }
    err_ = err;
    if (said.find("Server listening") == std::string::npos) {
      throw std::runtime_error("sshd did not start: " + said);
    }
  }
  ~SshServer() {
    ::kill(child_.pid, SIGTERM);
    ::waitpid(child_.pid, nullptr, 0);
    if (err_ != nullptr) std::fclose(err_);
  }
  std::filesystem::path key() const { return dir_ / "user_key"; }

 private:
  std::filesystem::path dir_;
  test::SelfChild child_;
  FILE* err_ = nullptr;
};

class Where : public Actor {
 public:
  std::string address() { return detail::address_text(id().proc); }
  static constexpr auto endpoints = baton::endpoints<&Where::address>();
};

/// The options that reach the test's sshd with the test's key.
job::SshOptions ssh_options(const std::string& key, const std::string& remote_dir) {
  job::SshOptions options;
  options.identity_file = key;
  options.ssh_args = {"-o", "UserKnownHostsFile=/dev/null",
                      "-o", "StrictHostKeyChecking=no",
                      "-o", "LogLevel=ERROR"};
  options.agent = BATON_HOST_BIN;
  options.remote_dir = remote_dir;
  return options;
}

/// The processes (other than this one) whose command line holds `needle`.
std::vector<pid_t> running_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (pid == std::to_string(::getpid())) continue;
    std::string cmdline;
    std::ifstream in(e.path() / "cmdline");
    for (std::string arg; std::getline(in, arg, '\0');) cmdline += arg + " ";
    if (cmdline.find(needle) != std::string::npos) out.push_back(std::stoi(pid));
  }
  return out;
}

/// Waits until no process whose command line holds `needle` runs; false past `deadline`.
bool all_end(const std::string& needle, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const std::vector<pid_t> pids = running_with(needle);
    if (pids.empty()) return true;
    for (pid_t pid : pids) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (fd < 0) continue;  // gone already
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      ::close(fd);
      if (ready == 0) return false;
    }
  }
}

/// A first run of a program, in a process of its own: it starts its job's agent, uses it, and
/// ends at once, leaving that agent to wind down on its own. `spec`: "ADDRESS KEY REMOTE_DIR".
void run_first_program(const char* spec) {
  std::istringstream in(spec);
  std::string address, key, remote_dir;
  in >> address >> key >> remote_dir;
  job::SshJob job(Runtime::get(), {address}, ssh_options(key, remote_dir));
  ProcMesh procs = job.hosts().spawn_procs({{"gpus", 2}});
  std::string line = "first run:";
  for (int v : procs.spawn<Member>("first").call(&Member::twice, 5).get().values()) {
    line += " " + std::to_string(v);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::_Exit(0);  // no orderly end: the agent finds its controller gone
}

TEST(Ssh, AnSshJobStartsAgentsOverSshAndItsProcsAnswer) {
  std::unique_ptr<test::NetHosts> net;
  try {
    net = std::make_unique<test::NetHosts>(1);
  } catch (const std::exception& e) {
    FAIL() << "cannot make a network namespace (this test needs root and iproute2): " << e.what();
  }
  test::TempDir dir;
  std::unique_ptr<SshServer> sshd;
  try {
    sshd = std::make_unique<SshServer>(*net, 0, dir.path);
  } catch (const std::exception& e) {
    FAIL() << "cannot start an OpenSSH server: " << e.what();
  }
  const job::SshOptions options = ssh_options(sshd->key().string(), (dir.path / "remote").string());
  // A first run of the program, which ends abruptly: its agent winds down on its own meanwhile.
  {
    auto env = test::environment({"BATON_TEST_SSH_FIRST="});
    env.push_back("BATON_TEST_SSH_FIRST=" + net->address(0) + " " + options.identity_file + " " +
                  options.remote_dir);
    const test::SelfRun first = test::run_self("first-program", env, STDOUT_FILENO);
    ASSERT_THAT(first.text, HasSubstr("first run: 10 10"));
  }
  // Procs of this host, which must outlive both jobs untouched.
  ProcMesh near = this_host().spawn_procs({{"procs", 2}});
  auto near_members = near.spawn<Member>("near");
  // The same job twice more, right after: each starts while the last one's agent may still be
  // winding down, and must not depend on it (each agent serves on a free port of its own).
  for (int run = 0; run < 2; ++run) {
    job::SshJob job(Runtime::get(), {net->address(0)}, options);
    ProcMesh procs = job.hosts().spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 1}, {"gpus", 2}}));
    auto where = procs.spawn<Where>("where");
    for (const auto& a : where.call(&Where::address).get().values()) {
      EXPECT_THAT(a, HasSubstr("tcp://" + net->address(0) + ":"));
    }
    EXPECT_EQ(procs.spawn<Member>("members").call(&Member::twice, 5).get().values(),
              (std::vector<int>{10, 10}))
        << "run " << run;
    procs.stop().get();
  }
  EXPECT_EQ(near_members.call(&Member::twice, 3).get().values(), (std::vector<int>{6, 6}));
  near.stop().get();
  // The first run's agent ends on its own, its controller gone, and its ssh session with it
  // (before this test takes its host and sshd away).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  EXPECT_TRUE(all_end((dir.path / "remote" / "baton-host-").string(), deadline))
      << "the first run's agent outlived its controller";
  EXPECT_TRUE(all_end(sshd->key().string(), deadline))
      << "the first run's ssh session outlived its agent";
  // The agent was copied once, with only the user allowed in; the credentials went in private
  // and the agent took them out of the file as it started.
  std::size_t agents = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path / "remote")) {
    const auto name = e.path().filename().string();
    const auto perms = std::filesystem::status(e.path()).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
              std::filesystem::perms::none)
        << name;
    if (name.starts_with("baton-host-")) ++agents;
    EXPECT_FALSE(name.starts_with("credentials-")) << name << " was left behind";
  }
  EXPECT_EQ(agents, 1u);  // the same bytes each run
}

TEST(Ssh, AHostSshCannotReachIsAnErrorWithSshsOwnWords) {
  job::SshOptions options;
  options.agent = BATON_HOST_BIN;
  options.ssh_args = {"-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=no"};
  options.port = 1;  // nothing listens there
  job::SshJob job(Runtime::get(), {"127.0.0.1"}, options);
  try {
    (void)job.hosts();
    ADD_FAILURE() << "a host ssh cannot reach was accepted";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1"));
    EXPECT_THAT(e.what(), HasSubstr("Connection refused"));
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("BATON_TEST_SSH_FIRST")) {
    return baton::test::run_hosts_test(argc, argv, [spec] { baton::run_first_program(spec); });
  }
  return baton::test::run_hosts_test(argc, argv);
}
