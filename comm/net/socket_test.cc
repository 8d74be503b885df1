// Sockets on the loopback only: listen on an ephemeral port, connect, move
// bytes with deadlines, and the errors for refused, closed and slow peers.
#include "comm/net/socket.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace colossal::comm::net {
namespace {

TEST(SocketTest, HostPortBracketsIpv6) {
  EXPECT_EQ(host_port("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(host_port("::1", 80), "[::1]:80");
}

TEST(SocketTest, ConnectAcceptAndTransfer) {
  int port = 0;
  auto listener = listen_tcp("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_GT(port, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto client = connect_tcp("127.0.0.1", port, deadline);
  ASSERT_TRUE(client.ok()) << client.status();
  auto server = accept_tcp(listener->get(), deadline, "test accept");
  ASSERT_TRUE(server.ok()) << server.status();

  // More than a socket buffer, so both sides must make progress together.
  std::string big(8 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131);
  std::string got(big.size(), 0);
  std::thread writer([&] {
    EXPECT_TRUE(write_all(client->get(), big.data(), big.size(), deadline, "w").ok());
  });
  ASSERT_TRUE(read_all(server->get(), got.data(), got.size(), deadline, "r").ok());
  writer.join();
  EXPECT_EQ(got, big);
  EXPECT_NE(peer_name(server->get()).find("127.0.0.1:"), std::string::npos);
}

TEST(SocketTest, RefusedConnectionTimesOutNamingTheAddress) {
  int port = 0;
  { auto l = listen_tcp("127.0.0.1", 0, &port); ASSERT_TRUE(l.ok()); }  // closed again
  auto client = connect_tcp("127.0.0.1", port, absl::Now() + absl::Milliseconds(200));
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(client.status())) << client.status();
  EXPECT_NE(client.status().message().find("127.0.0.1:" + std::to_string(port)),
            std::string::npos) << client.status();
}

TEST(SocketTest, ReadReportsClosedPeerAndTimeout) {
  int port = 0;
  auto listener = listen_tcp("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto client = connect_tcp("127.0.0.1", port, deadline);
  ASSERT_TRUE(client.ok());
  auto server = accept_tcp(listener->get(), deadline, "accept");
  ASSERT_TRUE(server.ok());
  char buf[4];
  absl::Status slow = read_all(server->get(), buf, 4, absl::Now() + absl::Milliseconds(50), "slow");
  EXPECT_TRUE(absl::IsDeadlineExceeded(slow)) << slow;
  EXPECT_NE(slow.message().find("slow"), std::string::npos);
  client->reset();
  absl::Status closed = read_all(server->get(), buf, 4, deadline, "closed");
  EXPECT_TRUE(absl::IsUnavailable(closed)) << closed;
}

TEST(SocketTest, AcceptTimesOut) {
  int port = 0;
  auto listener = listen_tcp("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok());
  auto s = accept_tcp(listener->get(), absl::Now() + absl::Milliseconds(30), "waiting for rank 1");
  EXPECT_TRUE(absl::IsDeadlineExceeded(s.status()));
  EXPECT_NE(s.status().message().find("waiting for rank 1"), std::string::npos);
}

TEST(SocketTest, LocalAddressTowardLoopback) {
  auto a = local_address_toward("127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
}

TEST(SocketTest, BadPortIsInvalidArgument) {
  int port = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(listen_tcp("127.0.0.1", 70000, &port).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      connect_tcp("127.0.0.1", 0, absl::Now() + absl::Seconds(1)).status()));
}

}  // namespace
}  // namespace colossal::comm::net
