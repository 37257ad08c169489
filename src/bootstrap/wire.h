// Bootstrap wire format: framing, message bodies and the ncclUniqueId layout.
//
// Every message on every bootstrap socket is a frame: a fixed 32-byte header
//   u64 magic | u32 type | u32 srcRank | u32 tag | u32 reserved (=0) | u64 payloadLength
// followed by payloadLength bytes. All integers are little-endian and are
// encoded field by field (no struct copies, so padding never travels).
// Decoders never trust input: wrong magic, unknown type, non-zero reserved
// field, oversized payload or short buffer are errors, never UB. They are
// fuzzed by tests/fuzz.
//
// Threading: pure functions and value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "core/status.h"

namespace ferry::boot {

constexpr size_t kFrameHeaderBytes = 32;
constexpr uint64_t kMaxFramePayload = 1ull << 30;  // 1 GiB
constexpr uint32_t kMaxRanks = 1u << 24;

enum class FrameType : uint32_t {
  kRootHello = 1,  // rank -> root: RootHello body
  kRootReply = 2,  // root -> rank: RootReply body
  kPeerHello = 3,  // first frame on a rank-to-rank connection: PeerHello body
  kData = 4,       // rank -> rank: raw payload for (srcRank, tag)
};
bool isKnownFrameType(uint32_t type);

struct FrameHeader {
  uint64_t magic = 0;
  FrameType type = FrameType::kData;
  uint32_t srcRank = 0;
  uint32_t tag = 0;
  uint64_t payloadLength = 0;
};

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
// Returns ncclRemoteError for anything malformed (a peer or stranger sent it)
// and ncclInternalError for a null or short buffer; *why gets the reason.
// Logs nothing: callers WARN, since they know who sent the bytes.
[[nodiscard]] Status decodeFrameHeader(const uint8_t* bytes, size_t n, uint64_t expectedMagic,
                                       FrameHeader* out, std::string* why = nullptr);

// Bounds-checked little-endian writer/reader.
class WireWriter {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void u16(uint16_t v);
  void u32(uint32_t v);
  void u64(uint64_t v);
  void bytes(const void* p, size_t n);
  const std::vector<uint8_t>& data() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

class WireReader {
 public:
  WireReader(const uint8_t* p, size_t n) : p_(p), n_(p ? n : 0) {}
  bool u8(uint8_t* v);
  bool u16(uint16_t* v);
  bool u32(uint32_t* v);
  bool u64(uint64_t* v);
  bool bytes(void* out, size_t n);
  size_t remaining() const { return n_ - pos_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// A socket address on the wire: 24 bytes
//   u8 version (4|6) | u8 reserved=0 | u16 port | u32 scopeId | u8 ip[16]
// IPv4 uses ip[0..3]; the rest (and scopeId) must be zero. Port must be != 0.
constexpr size_t kAddressRecordBytes = 24;
void encodeAddress(const SocketAddress& a, WireWriter* w);
[[nodiscard]] bool decodeAddress(WireReader* r, SocketAddress* out, std::string* why);
[[nodiscard]] Status decodeAddressRecord(const uint8_t* p, size_t n, SocketAddress* out,
                                         std::string* why = nullptr);

struct RootHello {
  uint32_t rank = 0;
  uint32_t nranks = 0;
  SocketAddress listen;
};
struct RootReply {
  uint32_t successorRank = 0;
  SocketAddress successor;
};
struct PeerHello {
  uint32_t rank = 0;
  uint32_t nranks = 0;
};

std::vector<uint8_t> encodeRootHello(const RootHello& m);
std::vector<uint8_t> encodeRootReply(const RootReply& m);
std::vector<uint8_t> encodePeerHello(const PeerHello& m);
// Body decoders: exact length required; ranks validated (rank < nranks <=
// kMaxRanks). ncclRemoteError when malformed, reason in *why.
[[nodiscard]] Status decodeRootHello(const uint8_t* p, size_t n, RootHello* out,
                                     std::string* why = nullptr);
[[nodiscard]] Status decodeRootReply(const uint8_t* p, size_t n, RootReply* out,
                                     std::string* why = nullptr);
[[nodiscard]] Status decodePeerHello(const uint8_t* p, size_t n, PeerHello* out,
                                     std::string* why = nullptr);
// Largest body the root or a listen socket accepts before identification.
constexpr uint64_t kMaxControlPayload = 256;

// A header + body as one byte vector, ready to send.
std::vector<uint8_t> encodeFrame(uint64_t magic, FrameType type, uint32_t srcRank, uint32_t tag,
                                 const std::vector<uint8_t>& body);

// ncclUniqueId layout (128 bytes, rest zero):
//   "FRYB" | u8 version=1 | u8 mode | u16 reserved=0 | u64 magic | address record (24)
// mode: 0 = a root thread serves this id; 1 = NCCL_COMM_ID: rank 0 serves it.
constexpr uint8_t kUniqueIdVersion = 1;
struct UniqueIdInfo {
  uint64_t magic = 0;
  bool commIdMode = false;
  SocketAddress root;
};
void encodeUniqueId(const UniqueIdInfo& info, ncclUniqueId* id);
[[nodiscard]] Status decodeUniqueId(const ncclUniqueId& id, UniqueIdInfo* out,
                                    std::string* why = nullptr);

// Deterministic magic for an NCCL_COMM_ID string: every process computes the
// same one. Never 0.
uint64_t magicFromCommId(const std::string& commId);

}  // namespace ferry::boot
