// TLS on TCP links: per-job certificates, mutual verification against the job's CA, refusal
// of a peer from another CA and of a peer that speaks plaintext. Waits are on conditions with a
// generous deadline.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"

namespace baton::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

using testing::Inbox;
using testing::make;

/// A directory of its own for one job's certificates, removed afterwards.
struct JobDir {
  std::filesystem::path path;
  JobDir() {
    std::string t = (std::filesystem::temp_directory_path() / "baton-tls-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~JobDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

LinkOptions options_for(const TlsOptions& tls, const std::string& secret) {
  LinkOptions o;
  o.tls = tls;
  o.secret = secret;
  o.dead_after = 5s;
  return o;
}

TEST(Tls, JobCertificatesAreWrittenWithAPrivateKey) {
  JobDir dir;
  const TlsOptions t = make_job_certificates(dir.path.string());
  EXPECT_TRUE(t.enabled());
  for (const auto& f : {t.ca_file, t.cert_file, t.key_file}) {
    EXPECT_TRUE(std::filesystem::exists(f)) << f;
  }
  struct stat st {};
  ASSERT_EQ(::stat(t.key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Tls, PeersOfOneJobExchangeFramesBothWaysOverTls) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  const std::string secret = new_job_secret();
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>& link) {
        return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);  // echo
        });
      },
      options_for(tls, secret));
  Inbox client_in;
  auto client =
      Link::connect(io, listener->address(), client_in.handler(), options_for(tls, secret));
  constexpr std::uint64_t kCount = 50;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(client->send(make(i, i % 10 == 0 ? (1 << 20) : 100 + i)));
  }
  ASSERT_TRUE(client_in.wait_envelopes(kCount));
  std::lock_guard lock(client_in.mu);
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(client_in.envelopes[i].dest.port, i);
    const auto [n, bytes] = decode<std::tuple<int, Bytes>>(client_in.envelopes[i].body);
    ASSERT_EQ(n, static_cast<int>(i));
    ASSERT_EQ(bytes.size(), i % 10 == 0 ? std::size_t{1} << 20 : 100 + i);
  }
  EXPECT_TRUE(client_in.closed.empty());
}

TEST(Tls, APeerWithACertificateFromAnotherCaIsRefused) {
  JobDir ours_dir;
  JobDir theirs_dir;
  const TlsOptions ours = make_job_certificates(ours_dir.path.string());
  const TlsOptions theirs = make_job_certificates(theirs_dir.path.string());
  const std::string secret = new_job_secret();  // even with the secret: the CA decides
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(ours, secret));
  Inbox client_in;
  auto client =
      Link::connect(io, listener->address(), client_in.handler(), options_for(theirs, secret));
  // Queued, or refused at once if the handshake has already failed: either way it never lands.
  (void)client->send(make(1, 10));
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_EQ(server_in.count(), 0u);
}

TEST(Tls, APlaintextPeerIsRefused) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(tls, {}));
  // A dialler without TLS: its frames are not a TLS handshake.
  Inbox client_in;
  LinkOptions plain;
  plain.dead_after = 5s;
  plain.reconnect_for = 300ms;
  auto client = Link::connect(io, listener->address(), client_in.handler(), plain);
  (void)client->send(make(1, 10));  // false if the refusal came first
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_EQ(server_in.count(), 0u);
  // The server hangs up on every try before it answers: the dialler backs off and gives up at
  // the repair's deadline, not redial for ever.
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("not restored within 300 ms"));
}

TEST(Tls, UnixLinksNeverUseTls) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  IoThread io;
  Inbox server_in;
  const std::string path = (dir.path / "unix.sock").string();
  auto listener = Listener::listen(
      io, Address::parse("unix://" + path),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(tls, {}));
  // A plain dialler is understood: TLS is for links that leave the host.
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler());
  ASSERT_TRUE(client->send(make(1, 10)));
  ASSERT_TRUE(server_in.wait_envelopes(1));
}

}  // namespace
}  // namespace baton::net
