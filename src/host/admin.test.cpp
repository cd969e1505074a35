// The controller's admin API, over real HTTP on the loopback: the token, what it shows of a job
// with workers, Prometheus' format, and garbage from a hostile client.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.hpp"
#include "host/admin.hpp"
#include "host/admin.test.hpp"
#include "host/hosts.test.hpp"
#include "host/job_dir.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

class Echo : public Actor {
 public:
  int echo(int x) { return x; }
  /// Works for `ms` milliseconds (a long endpoint, as a slow step of training is).
  int work(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
  static constexpr auto endpoints = baton::endpoints<&Echo::echo, &Echo::work>();
};

TEST(Admin, ARequestWithoutTheTokenOrWithAWrongOneGets401AndNothingElse) {
  const auto job = this_job();
  ASSERT_THAT(job.admin_url, ::testing::StartsWith("http://127.0.0.1:"));
  struct stat st {};
  ASSERT_EQ(::stat((job.dir / internal::kAdminTokenFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);  // only this user reads the token

  for (const std::string& headers : {std::string(), std::string("Authorization: Bearer wrong\r\n"),
                                     "Authorization: Bearer " + token_of(job) + "x\r\n",
                                     "Authorization: Basic " + token_of(job) + "\r\n"}) {
    const Reply r = get(job, "/api/procs", headers);
    EXPECT_EQ(r.status, 401) << headers;
    EXPECT_THAT(r.body, HasSubstr((job.dir / internal::kAdminTokenFile).string()));
    EXPECT_THAT(r.body, ::testing::Not(HasSubstr("\"pid\"")));  // nothing of the job
  }
  const Reply ok = get(job, "/api/job");
  EXPECT_EQ(ok.status, 200);
  EXPECT_THAT(ok.body, HasSubstr("\"pid\": " + std::to_string(::getpid())));
  const Reply missing = get(job, "/api/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("GET /api lists them"));
}

TEST(Admin, TheProcsOfTheJobAndTheirStatesAreListed) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto echo = procs.spawn<Echo>("echo");
  ASSERT_EQ(echo.call(&Echo::echo, 7).get().values(), (std::vector<int>{7, 7}));
  const Reply r = get(job, "/api/procs");
  ASSERT_EQ(r.status, 200);
  // The controller and both workers, each with its pid; the workers running.
  std::smatch m;
  const std::regex running("\"state\": \"running\"");
  std::size_t n = 0;
  for (auto it = std::sregex_iterator(r.body.begin(), r.body.end(), running);
       it != std::sregex_iterator(); ++it) {
    ++n;
  }
  EXPECT_EQ(n, 3U) << r.body;
  EXPECT_THAT(r.body, HasSubstr("\"controller\": true"));
  EXPECT_THAT(r.body, HasSubstr("\"rank\": 1"));
  const Reply after = [&] {
    procs.stop().get();
    return get(job, "/api/procs");
  }();
  // Stopped on purpose, and their processes gone (a stop waits for them).
  EXPECT_THAT(after.body, HasSubstr("\"state\": \"stopped\"")) << after.body;
  EXPECT_THAT(after.body, ::testing::Not(HasSubstr("\"state\": \"stopping\""))) << after.body;
}

TEST(Admin, EachActorSaysWhatItDoesAndWhatItHandled) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto echo = procs.spawn<Echo>("echo");
  for (int i = 0; i < 5; ++i) (void)echo.call(&Echo::echo, i).get();
  const Reply idle = get(job, "/api/actors");
  ASSERT_EQ(idle.status, 200);
  const std::regex member(R"re("id": "procs[0-9]+\.[01]/echo\[0\]")re");
  EXPECT_EQ(std::distance(std::sregex_iterator(idle.body.begin(), idle.body.end(), member),
                          std::sregex_iterator()),
            2)
      << idle.body;
  // Both members handled their five calls and are idle; the runtime's agents are listed too.
  const std::regex handled(R"re("handled": 5,)re");
  EXPECT_EQ(std::distance(std::sregex_iterator(idle.body.begin(), idle.body.end(), handled),
                          std::sregex_iterator()),
            2)
      << idle.body;
  EXPECT_THAT(idle.body, HasSubstr("/agent[0]\""));
  EXPECT_THAT(idle.body, HasSubstr("\"unanswered\": []"));
  // One member inside a long endpoint: it says which, and for how long so far.
  auto busy = echo.at(1).call(&Echo::work, 3000);
  Reply during;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    during = get(job, "/api/actors");
  } while (during.body.find("::work\"") == std::string::npos &&
           std::chrono::steady_clock::now() < until);
  EXPECT_THAT(during.body, HasSubstr("Echo::work\",\n      \"running_s\"")) << during.body;
  EXPECT_EQ(std::move(busy).get(), 3000);
  // The `baton` command shows the same under each proc, without the agents.
  const auto tree = baton_cli({"--job", std::to_string(::getpid()), "ls"});
  EXPECT_THAT(tree.text, HasSubstr("/echo[0]  "));
  EXPECT_THAT(tree.text, HasSubstr("idle  handled 6"));
  EXPECT_THAT(tree.text, ::testing::Not(HasSubstr("/agent[0]")));
  procs.stop().get();
}

/// The value of the sample whose line starts with `prefix` (its name and labels), or -1.
double sample(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    if (l.starts_with(prefix + " ")) return std::stod(l.substr(prefix.size() + 1));
  }
  return -1;
}

/// Runs `command` through the shell with `input` on its standard input; its status and output.
std::pair<int, std::string> shell_with_input(const std::string& command, const std::string& input) {
  const std::string file = ::testing::TempDir() + "metrics-" + std::to_string(::getpid());
  {
    std::ofstream out(file);
    out << input;
  }
  std::string output;
  FILE* p = ::popen((command + " < " + file + " 2>&1").c_str(), "r");
  char buf[4096];
  std::size_t n = 0;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  const int status = p != nullptr ? ::pclose(p) : -1;
  std::remove(file.c_str());
  return {status, output};
}

TEST(Admin, MetricsPassPromtoolAndCountTheCallsMadeByEndpointLinkAndActor) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto echo = procs.spawn<Echo>("echo");
  (void)echo.call(&Echo::echo, 1).get();
  const std::string worker = echo.at(0).id().proc.name;
  const std::regex calls(
      R"re(baton_call_duration_seconds_count\{proc="ctl",endpoint="[^"]*Echo::echo"\})re");
  auto read = [&job] {
    const Reply r = get(job, "/metrics");
    EXPECT_EQ(r.status, 200);
    return r.body;
  };
  const std::string before = read();
  // Prometheus' own checker takes it, with no complaint.
  const auto [status, complaints] = shell_with_input("promtool check metrics", before);
  EXPECT_EQ(status, 0) << complaints << before;
  EXPECT_EQ(complaints, "") << before;
  EXPECT_THAT(before, HasSubstr("baton_procs{state=\"running\"} 1"));
  EXPECT_THAT(before, HasSubstr("# TYPE baton_call_duration_seconds histogram"));
  std::smatch found;
  ASSERT_TRUE(std::regex_search(before, found, calls)) << before;
  const std::string series = found[0];
  const std::string sent = "baton_messages_sent_total{proc=\"ctl\",link=\"host\"}";
  const std::string handled =
      "baton_messages_handled_total{proc=\"" + worker + "\",actor=\"" + worker + "/echo[0]\"}";
  for (int i = 0; i < 10; ++i) (void)echo.call(&Echo::echo, i).get();
  const std::string after = read();
  // Each call: one round trip of the controller's, one message handled by the member.
  EXPECT_EQ(sample(after, series) - sample(before, series), 10) << after;
  EXPECT_EQ(sample(after, handled) - sample(before, handled), 10) << after;
  EXPECT_GE(sample(after, sent) - sample(before, sent), 10) << after;
  EXPECT_GT(sample(after, "baton_bytes_received_total{proc=\"" + worker + "\",link=\"host\"}"), 0);
  EXPECT_GE(
      sample(after, "baton_envelopes_sent_total") - sample(before, "baton_envelopes_sent_total"),
      10);
  // Every round trip is in some bucket: +Inf counts them all.
  const std::string inf = series.substr(0, series.size() - 1);  // drop the closing brace
  EXPECT_EQ(
      sample(after, std::string(inf).replace(0, std::strlen("baton_call_duration_seconds_count"),
                                             "baton_call_duration_seconds_bucket") +
                        ",le=\"+Inf\"}"),
      sample(after, series));
  procs.stop().get();
}

TEST(Admin, GarbageHalfRequestsAndDroppedConnectionsLeaveTheApiServing) {
  const auto job = this_job();
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {  // random bytes
    const int fd = connect_to(job);
    std::string junk(1 + rng() % 4096, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    send_all(fd, junk);
    ::shutdown(fd, SHUT_WR);
    (void)read_to_end(fd);  // an error, or the connection closed: never a hang
    ::close(fd);
  }
  for (int i = 0; i < 20; ++i) {  // half a request, then gone
    const int fd = connect_to(job);
    send_all(fd, "GET /api/procs HTTP/1.1\r\nAuthorization: Bea");
    ::close(fd);
  }
  for (int i = 0; i < 10000; ++i) ::close(connect_to(job));  // opened and dropped
  // A header too long for any request.
  const Reply huge = get(job, "/api/job", "X-Big: " + std::string(1 << 20, 'a') + "\r\n");
  EXPECT_NE(huge.status, 200);
  const Reply ok = get(job, "/api/job");
  EXPECT_EQ(ok.status, 200);
}

TEST(BatonCommand, ListsTheJobsProcsAsATreeAndAsJsonAndPrintsItsMetrics) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto echo = procs.spawn<Echo>("echo");
  (void)echo.call(&Echo::echo, 1).get();
  const std::string pid = std::to_string(::getpid());
  const auto jobs = baton_cli({"jobs"});
  EXPECT_EQ(jobs.status, 0);
  EXPECT_THAT(jobs.text, HasSubstr(pid + "  http://127.0.0.1:"));
  // Other tests' jobs may run beside this one: name it.
  const auto tree = baton_cli({"--job", pid, "ls"});
  EXPECT_EQ(tree.status, 0) << tree.text;
  EXPECT_THAT(tree.text, HasSubstr("ctl (pid " + pid + ")  controller"));
  EXPECT_THAT(tree.text, HasSubstr("└─ procs"));
  EXPECT_THAT(tree.text, HasSubstr(", rank 1)  running"));
  const auto as_json = baton_cli({"--job", pid, "ls", "--json"});
  EXPECT_EQ(as_json.status, 0);
  EXPECT_THAT(as_json.text, HasSubstr("\"controller\": true"));
  const auto metrics = baton_cli({"--job", pid, "metrics"});
  EXPECT_EQ(metrics.status, 0);
  EXPECT_THAT(metrics.text, HasSubstr("baton_procs{state=\"running\"} 2"));
  procs.stop().get();
}

TEST(BatonCommand, SaysWhatIsWrongAndExitsWithOne) {
  const auto job = this_job();
  const auto no_job = baton_cli({"--job", "1", "ls"}, STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(no_job.status), 1);
  EXPECT_THAT(no_job.text, HasSubstr("no job of this user with controller pid 1"));
  const std::string token = (job.dir / internal::kAdminTokenFile).string();
  const auto gone =
      baton_cli({"--addr", "http://127.0.0.1:1", "--token", token, "ls"}, STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(gone.status), 1);
  EXPECT_THAT(gone.text, HasSubstr("it has ended, or the address is wrong"));
  const std::string wrong = (job.dir / "wrong-token").string();
  {
    std::ofstream out(wrong);
    out << "not-the-token\n";
  }
  const auto refused = baton_cli({"--addr", job.admin_url, "--token", wrong, "ls"}, STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(refused.status), 1);
  EXPECT_THAT(refused.text, HasSubstr("refused the token"));
  const auto no_token = baton_cli({"--addr", job.admin_url, "ls"}, STDERR_FILENO);
  EXPECT_THAT(no_token.text, HasSubstr("--addr needs --token FILE"));
  const auto help = baton_cli({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.text, HasSubstr("failures"));
}

TEST(BatonCommand, EverySubcommandAgainstAJobThatEndedSaysSo) {
  const auto job = this_job();
  const std::string token = (job.dir / internal::kAdminTokenFile).string();
  // A port nothing listens on any more: where a job that ended served.
  const std::vector<std::vector<std::string>> commands = {
      {"ls"},
      {"top"},
      {"stack"},
      {"logs"},
      {"failures"},
      {"metrics"},
      {"kill", "procs0.0"},
      {"dashboard"},
      {"debug"},
      {"debug", "--list"},
      {"trace", "-s", "0.1", "-o", "/dev/null"}};
  for (const auto& command : commands) {
    std::vector<std::string> args = {"--addr", "http://127.0.0.1:1", "--token", token};
    args.insert(args.end(), command.begin(), command.end());
    const auto run = baton_cli(args, STDERR_FILENO);
    EXPECT_EQ(WEXITSTATUS(run.status), 1) << command.front();
    EXPECT_THAT(run.text, HasSubstr("it has ended")) << command.front() << ": " << run.text;
  }
}

TEST(Admin, AnAddressOtherThanTheLoopbackIsServedWithTlsOnly) {
  test::TempDir dir;
  test::TempDir other;
  const net::TlsOptions tls = net::make_job_certificates(dir.path.string());
  const net::TlsOptions stranger = net::make_job_certificates(other.path.string());
  internal::AdminSource source;
  source.snapshot = [](bool) {
    internal::AdminSnapshot s;
    s.controller = "tls-ctl";
    s.failures = {"a failure the API shows"};
    return s;
  };
  // Without a certificate, it does not serve at all.
  try {
    internal::AdminServer plain("0.0.0.0:0", dir.path, source);
    ADD_FAILURE() << "an address other than the loopback was served without TLS";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TLS"));
  }
  internal::AdminServer server("0.0.0.0:0", dir.path, source, tls);
  ASSERT_THAT(server.url(), ::testing::StartsWith("https://0.0.0.0:"));
  const std::string token = (dir.path / internal::kAdminTokenFile).string();
  const std::string ca = (dir.path / internal::kAdminCaFile).string();
  // The `baton` command, with the job's CA: the API answers.
  const auto ok = baton_cli({"--addr", server.url(), "--token", token, "--ca", ca, "failures"});
  EXPECT_EQ(ok.status, 0) << ok.text;
  EXPECT_THAT(ok.text, HasSubstr("a failure the API shows"));
  // With another job's CA, the handshake fails and says why.
  const auto wrong =
      baton_cli({"--addr", server.url(), "--token", token, "--ca", stranger.ca_file, "failures"},
                STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(wrong.status), 1);
  EXPECT_THAT(wrong.text, HasSubstr("TLS handshake"));
  // Without --ca, the command says what it needs.
  const auto no_ca =
      baton_cli({"--addr", server.url(), "--token", token, "failures"}, STDERR_FILENO);
  EXPECT_THAT(no_ca.text, HasSubstr("--ca FILE"));
  // Plain HTTP gets nothing of the job, and the server serves on.
  internal::RunningJob as_plain;
  as_plain.admin_url = server.url();
  const Reply refused = get(as_plain, "/api/failures", "Authorization: Bearer x\r\n");
  EXPECT_EQ(refused.status, 0);
  EXPECT_THAT(refused.body, ::testing::Not(HasSubstr("a failure")));
  EXPECT_EQ(baton_cli({"--addr", server.url(), "--token", token, "--ca", ca, "failures"}).status,
            0);
}

TEST(Admin, BatonAdminSaysWhatItTakes) {
  ::setenv("BATON_ADMIN", "somewhere", 1);
  EXPECT_THROW(internal::admin_address_from_env(), UsageError);
  ::setenv("BATON_ADMIN", "10.1.2.3:80", 1);
  EXPECT_EQ(internal::admin_address_from_env(), "10.1.2.3:80");  // served with TLS
  ::setenv("BATON_ADMIN", "off", 1);
  EXPECT_EQ(internal::admin_address_from_env(), std::nullopt);
  ::setenv("BATON_ADMIN", "127.0.0.1:0", 1);
  EXPECT_EQ(internal::admin_address_from_env(), "127.0.0.1:0");
  ::unsetenv("BATON_ADMIN");
  EXPECT_EQ(internal::admin_address_from_env(), "127.0.0.1:0");
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
