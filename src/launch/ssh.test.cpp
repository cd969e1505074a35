// SshJob against a real OpenSSH server: sshd in a network namespace host (keys made by the
// test), reached with the test's own key. Needs root, iproute2 and openssh-server (make deps).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
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
  job::SshOptions options;
  options.identity_file = sshd->key().string();
  options.ssh_args = {"-o", "UserKnownHostsFile=/dev/null",
                      "-o", "StrictHostKeyChecking=no",
                      "-o", "LogLevel=ERROR"};
  options.agent = BATON_HOST_BIN;
  options.remote_dir = (dir.path / "remote").string();
  {
    job::SshJob job({net->address(0)}, options);
    ProcMesh procs = job.hosts().spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 1}, {"gpus", 2}}));
    auto where = procs.spawn<Where>("where");
    for (const auto& a : where.call(&Where::address).get().values()) {
      EXPECT_THAT(a, HasSubstr("tcp://" + net->address(0) + ":"));
    }
    EXPECT_EQ(procs.spawn<Member>("members").call(&Member::twice, 5).get().values(),
              (std::vector<int>{10, 10}));
    procs.stop().get();
  }
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
  EXPECT_EQ(agents, 1u);
}

TEST(Ssh, AHostSshCannotReachIsAnErrorWithSshsOwnWords) {
  job::SshOptions options;
  options.agent = BATON_HOST_BIN;
  options.ssh_args = {"-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=no"};
  options.port = 1;  // nothing listens there
  job::SshJob job({"127.0.0.1"}, options);
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
  return baton::test::run_hosts_test(argc, argv);
}
