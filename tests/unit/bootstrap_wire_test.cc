// Bootstrap wire format: frame header, message bodies, unique id and the
// incremental FrameReader. Every decoder is fed both valid encodings (round
// trips over random values) and each malformed case it must reject.
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bootstrap/frame_reader.h"
#include "bootstrap/wire.h"
#include "common/random.h"

namespace ferry::boot {
namespace {

SocketAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  uint8_t ip[4] = {a, b, c, d};
  return SocketAddress::fromIp(AF_INET, ip, port);
}

SocketAddress randomAddress(test::Rng& rng) {
  uint8_t ip[16];
  for (auto& b : ip) b = static_cast<uint8_t>(rng.next());
  uint16_t port = static_cast<uint16_t>(rng.range(1, 65535));
  if (rng.below(2)) return SocketAddress::fromIp(AF_INET, ip, port);
  return SocketAddress::fromIp(AF_INET6, ip, port, static_cast<uint32_t>(rng.below(16)));
}

TEST(BootstrapWire, FrameHeaderRoundTrip) {
  test::Rng rng(test::testSeed(), 1);
  for (int i = 0; i < 1000; ++i) {
    FrameHeader h;
    h.magic = rng.next();
    h.type = static_cast<FrameType>(rng.range(1, 4));
    h.srcRank = static_cast<uint32_t>(rng.below(kMaxRanks));
    h.tag = static_cast<uint32_t>(rng.next());
    h.payloadLength = rng.below(kMaxFramePayload + 1);
    uint8_t buf[kFrameHeaderBytes];
    memset(buf, 0xA5, sizeof(buf));
    encodeFrameHeader(h, buf);
    FrameHeader out;
    ASSERT_EQ(decodeFrameHeader(buf, sizeof(buf), h.magic, &out), ncclSuccess);
    EXPECT_EQ(out.magic, h.magic);
    EXPECT_EQ(out.type, h.type);
    EXPECT_EQ(out.srcRank, h.srcRank);
    EXPECT_EQ(out.tag, h.tag);
    EXPECT_EQ(out.payloadLength, h.payloadLength);
  }
}

TEST(BootstrapWire, FrameHeaderIsLittleEndian) {
  FrameHeader h;
  h.magic = 0x0102030405060708ull;
  h.type = FrameType::kPeerHello;
  h.srcRank = 0x11223344;
  h.tag = 0x55667788;
  h.payloadLength = 0x99;
  uint8_t buf[kFrameHeaderBytes];
  encodeFrameHeader(h, buf);
  const uint8_t want[kFrameHeaderBytes] = {8, 7,    6,    5,    4,    3,    2,    1,    3,    0, 0,
                                           0, 0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55, 0, 0,
                                           0, 0,    0x99, 0,    0,    0,    0,    0,    0,    0};
  EXPECT_EQ(memcmp(buf, want, sizeof(buf)), 0);
}

struct BadHeaderCase {
  const char* name;
  size_t offset;  // byte to overwrite (little-endian field start)
  std::vector<uint8_t> bytes;
};

TEST(BootstrapWire, FrameHeaderRejections) {
  const uint64_t magic = 0xfeedfacecafebeefull;
  FrameHeader h;
  h.magic = magic;
  h.type = FrameType::kData;
  h.srcRank = 3;
  h.tag = 0x100;
  h.payloadLength = 10;
  uint8_t good[kFrameHeaderBytes];
  encodeFrameHeader(h, good);
  FrameHeader out;
  std::string why;
  // Short and null buffers.
  for (size_t n = 0; n < kFrameHeaderBytes; ++n) {
    EXPECT_EQ(decodeFrameHeader(good, n, magic, &out, &why), ncclInternalError) << n;
  }
  EXPECT_EQ(decodeFrameHeader(nullptr, 64, magic, &out, &why), ncclInternalError);
  EXPECT_EQ(decodeFrameHeader(good, sizeof(good), magic ^ 1, &out, &why), ncclRemoteError);
  EXPECT_EQ(why, "wrong magic");
  const std::vector<BadHeaderCase> cases = {
      {"type 0", 8, {0, 0, 0, 0}},
      {"type 5", 8, {5, 0, 0, 0}},
      {"type huge", 8, {0xff, 0xff, 0xff, 0xff}},
      {"src rank too big", 12, {0, 0, 0, 1}},
      {"reserved", 20, {1, 0, 0, 0}},
      {"too long", 24, {1, 0, 0, 0x40, 0, 0, 0, 0}},
      {"huge length", 24, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
  };
  for (const auto& c : cases) {
    uint8_t bad[kFrameHeaderBytes];
    memcpy(bad, good, sizeof(bad));
    memcpy(bad + c.offset, c.bytes.data(), c.bytes.size());
    EXPECT_EQ(decodeFrameHeader(bad, sizeof(bad), magic, &out, &why), ncclRemoteError) << c.name;
  }
  // The largest allowed payload is accepted, one more is not.
  h.payloadLength = kMaxFramePayload;
  encodeFrameHeader(h, good);
  EXPECT_EQ(decodeFrameHeader(good, sizeof(good), magic, &out), ncclSuccess);
  h.payloadLength = kMaxFramePayload + 1;
  encodeFrameHeader(h, good);
  EXPECT_EQ(decodeFrameHeader(good, sizeof(good), magic, &out), ncclRemoteError);
}

TEST(BootstrapWire, BodiesRoundTrip) {
  test::Rng rng(test::testSeed(), 2);
  for (int i = 0; i < 500; ++i) {
    RootHello hello;
    hello.nranks = static_cast<uint32_t>(rng.range(1, kMaxRanks));
    hello.rank = static_cast<uint32_t>(rng.below(hello.nranks));
    hello.listen = randomAddress(rng);
    auto b = encodeRootHello(hello);
    RootHello h2;
    ASSERT_EQ(decodeRootHello(b.data(), b.size(), &h2), ncclSuccess);
    EXPECT_EQ(h2.rank, hello.rank);
    EXPECT_EQ(h2.nranks, hello.nranks);
    EXPECT_TRUE(h2.listen == hello.listen)
        << hello.listen.toString() << " " << h2.listen.toString();

    RootReply reply{static_cast<uint32_t>(rng.below(kMaxRanks)), randomAddress(rng)};
    b = encodeRootReply(reply);
    RootReply r2;
    ASSERT_EQ(decodeRootReply(b.data(), b.size(), &r2), ncclSuccess);
    EXPECT_EQ(r2.successorRank, reply.successorRank);
    EXPECT_TRUE(r2.successor == reply.successor);

    PeerHello ph{hello.rank, hello.nranks};
    b = encodePeerHello(ph);
    PeerHello p2;
    ASSERT_EQ(decodePeerHello(b.data(), b.size(), &p2), ncclSuccess);
    EXPECT_EQ(p2.rank, ph.rank);
    EXPECT_EQ(p2.nranks, ph.nranks);
  }
}

TEST(BootstrapWire, BodyRejections) {
  RootHello hello{2, 4, v4(10, 0, 0, 1, 999)};
  auto good = encodeRootHello(hello);
  RootHello out;
  std::string why;
  // Every truncation and one extra byte.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(decodeRootHello(good.data(), n, &out, &why), ncclRemoteError) << n;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_EQ(decodeRootHello(longer.data(), longer.size(), &out, &why), ncclRemoteError);
  auto mutate = [&](size_t off, uint8_t v) {
    auto b = good;
    b[off] = v;
    return decodeRootHello(b.data(), b.size(), &out, &why);
  };
  EXPECT_EQ(mutate(0, 4), ncclRemoteError);     // rank 4 >= nranks 4
  EXPECT_EQ(mutate(4, 0), ncclRemoteError);     // nranks 0 (with rank 2)
  EXPECT_EQ(mutate(7, 0xff), ncclRemoteError);  // nranks > kMaxRanks
  EXPECT_EQ(mutate(8, 5), ncclRemoteError);     // address family 5
  EXPECT_EQ(mutate(9, 1), ncclRemoteError);     // reserved byte
  {
    auto b = good;
    b[10] = b[11] = 0;  // port 0
    EXPECT_EQ(decodeRootHello(b.data(), b.size(), &out, &why), ncclRemoteError);
  }
  EXPECT_EQ(mutate(12, 1), ncclRemoteError);         // IPv4 with a scope id
  EXPECT_EQ(mutate(8 + 8 + 4, 1), ncclRemoteError);  // IPv4 with trailing ip bytes
  EXPECT_EQ(mutate(8, 6), ncclSuccess);              // the same bytes read as IPv6 are fine

  RootReply reply;
  auto rb = encodeRootReply(RootReply{1, v4(1, 2, 3, 4, 5)});
  for (size_t n = 0; n < rb.size(); ++n) {
    EXPECT_EQ(decodeRootReply(rb.data(), n, &reply, &why), ncclRemoteError);
  }
  rb[3] = 0x01;  // successor rank 2^24 + 1
  EXPECT_EQ(decodeRootReply(rb.data(), rb.size(), &reply, &why), ncclRemoteError);

  PeerHello ph;
  auto pb = encodePeerHello(PeerHello{1, 2});
  EXPECT_EQ(decodePeerHello(pb.data(), pb.size() - 1, &ph, &why), ncclRemoteError);
  pb[0] = 2;
  EXPECT_EQ(decodePeerHello(pb.data(), pb.size(), &ph, &why), ncclRemoteError);
  EXPECT_EQ(decodePeerHello(nullptr, 8, &ph, &why), ncclRemoteError);

  SocketAddress a;
  EXPECT_EQ(decodeAddressRecord(good.data() + 8, kAddressRecordBytes, &a), ncclSuccess);
  EXPECT_TRUE(a == hello.listen);
  EXPECT_EQ(decodeAddressRecord(good.data() + 8, kAddressRecordBytes - 1, &a), ncclRemoteError);
}

TEST(BootstrapWire, UniqueIdRoundTripAndRejections) {
  test::Rng rng(test::testSeed(), 3);
  for (int i = 0; i < 200; ++i) {
    UniqueIdInfo info;
    info.magic = rng.next() | 1;
    info.commIdMode = rng.below(2) == 1;
    info.root = randomAddress(rng);
    ncclUniqueId id;
    memset(&id, 0x5a, sizeof(id));
    encodeUniqueId(info, &id);
    UniqueIdInfo out;
    ASSERT_EQ(decodeUniqueId(id, &out), ncclSuccess);
    EXPECT_EQ(out.magic, info.magic);
    EXPECT_EQ(out.commIdMode, info.commIdMode);
    EXPECT_TRUE(out.root == info.root);
  }
  UniqueIdInfo info{0x1234, false, v4(127, 0, 0, 1, 4000)};
  ncclUniqueId good;
  encodeUniqueId(info, &good);
  UniqueIdInfo out;
  std::string why;
  auto bad = [&](size_t off, char v) {
    ncclUniqueId id = good;
    id.internal[off] = v;
    return decodeUniqueId(id, &out, &why);
  };
  EXPECT_EQ(bad(0, 'X'), ncclRemoteError);  // tag
  EXPECT_EQ(bad(4, 2), ncclRemoteError);    // version
  EXPECT_EQ(bad(5, 2), ncclRemoteError);    // mode
  EXPECT_EQ(bad(6, 1), ncclRemoteError);    // reserved
  EXPECT_EQ(bad(16, 7), ncclRemoteError);   // address family
  EXPECT_EQ(bad(127, 1), ncclRemoteError);  // padding
  ncclUniqueId zero{};
  EXPECT_EQ(decodeUniqueId(zero, &out, &why), ncclRemoteError);
  ncclUniqueId zeroMagic = good;
  memset(zeroMagic.internal + 8, 0, 8);
  EXPECT_EQ(decodeUniqueId(zeroMagic, &out, &why), ncclRemoteError);
}

TEST(BootstrapWire, CommIdMagicIsDeterministic) {
  EXPECT_EQ(magicFromCommId("10.0.0.1:5000"), magicFromCommId("10.0.0.1:5000"));
  EXPECT_NE(magicFromCommId("10.0.0.1:5000"), magicFromCommId("10.0.0.1:5001"));
  EXPECT_NE(magicFromCommId(""), 0u);
}

// FrameReader over a socketpair: frames split at every byte, several frames
// back to back, and each failure kind.
class FrameReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    a_ = Socket(sv[0]);
    b_ = Socket(sv[1]);
  }
  void put(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(a_.fd(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  Socket a_, b_;
  const uint64_t magic_ = 0x0123456789abcdefull;
};

TEST_F(FrameReaderTest, ByteByByteAndBackToBack) {
  test::Rng rng(test::testSeed(), 4);
  std::vector<uint8_t> body(rng.range(1, 300));
  for (auto& x : body) x = static_cast<uint8_t>(rng.next());
  auto frame = encodeFrame(magic_, FrameType::kData, 7, 0x1234, body);
  FrameReader r(magic_, 1000);
  std::string why;
  for (size_t i = 0; i + 1 < frame.size(); ++i) {
    put({frame[i]});
    ASSERT_EQ(r.pump(b_, &why), FrameReader::Result::kNeedMore) << i;
  }
  put({frame.back()});
  ASSERT_EQ(r.pump(b_, &why), FrameReader::Result::kFrame);
  EXPECT_EQ(r.header().srcRank, 7u);
  EXPECT_EQ(r.header().tag, 0x1234u);
  EXPECT_EQ(r.payload(), body);
  r.next();
  auto empty = encodeFrame(magic_, FrameType::kData, 1, 2, {});
  std::vector<uint8_t> two = empty;
  two.insert(two.end(), frame.begin(), frame.end());
  put(two);
  ASSERT_EQ(r.pump(b_, &why), FrameReader::Result::kFrame);
  EXPECT_TRUE(r.payload().empty());
  r.next();
  ASSERT_EQ(r.pump(b_, &why), FrameReader::Result::kFrame);
  EXPECT_EQ(r.payload(), body);
  r.next();
  EXPECT_EQ(r.pump(b_, &why), FrameReader::Result::kNeedMore);
  a_.close();
  EXPECT_EQ(r.pump(b_, &why), FrameReader::Result::kClosed);
  EXPECT_FALSE(r.midFrame());
}

TEST_F(FrameReaderTest, Rejections) {
  FrameReader r(magic_, 16);
  std::string why;
  put(encodeFrame(magic_ + 1, FrameType::kData, 0, 0, {1, 2}));
  EXPECT_EQ(r.pump(b_, &why), FrameReader::Result::kBad);
  EXPECT_EQ(why, "wrong magic");
  FrameReader r2(magic_, 16);
  SetUp();
  put(encodeFrame(magic_, FrameType::kData, 0, 0, std::vector<uint8_t>(17, 1)));
  EXPECT_EQ(r2.pump(b_, &why), FrameReader::Result::kBad);
  FrameReader r3(magic_, 16);
  SetUp();
  auto f = encodeFrame(magic_, FrameType::kData, 0, 0, {1, 2, 3});
  f.pop_back();
  put(f);
  EXPECT_EQ(r3.pump(b_, &why), FrameReader::Result::kNeedMore);
  a_.close();
  EXPECT_EQ(r3.pump(b_, &why), FrameReader::Result::kClosed);
  EXPECT_TRUE(r3.midFrame());
}

}  // namespace
}  // namespace ferry::boot
