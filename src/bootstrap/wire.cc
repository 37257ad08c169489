#include "bootstrap/wire.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "core/hash.h"

namespace ferry::boot {

namespace {

const uint8_t kIdTag[4] = {'F', 'R', 'Y', 'B'};

Status malformed(std::string* why, const char* reason) {
  if (why) *why = reason;
  return ncclRemoteError;
}

}  // namespace

bool isKnownFrameType(uint32_t type) {
  return type >= static_cast<uint32_t>(FrameType::kRootHello) &&
         type <= static_cast<uint32_t>(FrameType::kData);
}

// ------------------------------------------------------------ writer/reader --

void WireWriter::u16(uint16_t v) {
  for (int i = 0; i < 2; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void WireWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void WireWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void WireWriter::bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  buf_.insert(buf_.end(), b, b + n);
}

bool WireReader::bytes(void* out, size_t n) {
  if (n > remaining()) return false;
  if (n) memcpy(out, p_ + pos_, n);
  pos_ += n;
  return true;
}
bool WireReader::u8(uint8_t* v) {
  return bytes(v, 1);
}
bool WireReader::u16(uint16_t* v) {
  uint8_t b[2];
  if (!bytes(b, 2)) return false;
  *v = static_cast<uint16_t>(b[0] | (b[1] << 8));
  return true;
}
bool WireReader::u32(uint32_t* v) {
  uint8_t b[4];
  if (!bytes(b, 4)) return false;
  *v = 0;
  for (int i = 3; i >= 0; --i) *v = (*v << 8) | b[i];
  return true;
}
bool WireReader::u64(uint64_t* v) {
  uint8_t b[8];
  if (!bytes(b, 8)) return false;
  *v = 0;
  for (int i = 7; i >= 0; --i) *v = (*v << 8) | b[i];
  return true;
}

// ------------------------------------------------------------------ frames --

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  WireWriter w;
  w.u64(h.magic);
  w.u32(static_cast<uint32_t>(h.type));
  w.u32(h.srcRank);
  w.u32(h.tag);
  w.u32(0);
  w.u64(h.payloadLength);
  memcpy(out, w.data().data(), kFrameHeaderBytes);
}

Status decodeFrameHeader(const uint8_t* bytes, size_t n, uint64_t expectedMagic, FrameHeader* out,
                         std::string* why) {
  if (bytes == nullptr || n < kFrameHeaderBytes) {
    if (why) *why = "short frame header";
    return ncclInternalError;
  }
  WireReader r(bytes, kFrameHeaderBytes);
  uint64_t magic = 0, length = 0;
  uint32_t type = 0, src = 0, tag = 0, reserved = 0;
  // The reads cannot fail: the buffer holds exactly kFrameHeaderBytes.
  (void)(r.u64(&magic) && r.u32(&type) && r.u32(&src) && r.u32(&tag) && r.u32(&reserved) &&
         r.u64(&length));
  if (magic != expectedMagic) return malformed(why, "wrong magic");
  if (!isKnownFrameType(type)) return malformed(why, "unknown frame type");
  if (reserved != 0) return malformed(why, "non-zero reserved field");
  if (src >= kMaxRanks) return malformed(why, "source rank out of range");
  if (length > kMaxFramePayload) return malformed(why, "payload too long");
  out->magic = magic;
  out->type = static_cast<FrameType>(type);
  out->srcRank = src;
  out->tag = tag;
  out->payloadLength = length;
  return ncclSuccess;
}

std::vector<uint8_t> encodeFrame(uint64_t magic, FrameType type, uint32_t srcRank, uint32_t tag,
                                 const std::vector<uint8_t>& body) {
  FrameHeader h;
  h.magic = magic;
  h.type = type;
  h.srcRank = srcRank;
  h.tag = tag;
  h.payloadLength = body.size();
  std::vector<uint8_t> out(kFrameHeaderBytes);
  encodeFrameHeader(h, out.data());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// --------------------------------------------------------------- addresses --

void encodeAddress(const SocketAddress& a, WireWriter* w) {
  uint8_t ip[16] = {0};
  size_t n = a.ipBytes(ip);
  w->u8(n == 4 ? 4 : (n == 16 ? 6 : 0));
  w->u8(0);
  w->u16(a.port());
  w->u32(a.scopeId());
  w->bytes(ip, 16);
}

bool decodeAddress(WireReader* r, SocketAddress* out, std::string* why) {
  uint8_t version = 0, reserved = 0;
  uint16_t port = 0;
  uint32_t scope = 0;
  uint8_t ip[16];
  if (!(r->u8(&version) && r->u8(&reserved) && r->u16(&port) && r->u32(&scope) &&
        r->bytes(ip, 16))) {
    if (why) *why = "truncated address";
    return false;
  }
  const char* bad = nullptr;
  if (version != 4 && version != 6)
    bad = "address family is neither 4 nor 6";
  else if (reserved != 0)
    bad = "non-zero reserved byte in address";
  else if (port == 0)
    bad = "address port 0";
  if (!bad && version == 4) {
    static const uint8_t kZero[12] = {0};
    if (scope != 0 || memcmp(ip + 4, kZero, 12) != 0) bad = "IPv4 address with trailing bytes";
  }
  if (bad) {
    if (why) *why = bad;
    return false;
  }
  *out = SocketAddress::fromIp(version == 4 ? AF_INET : AF_INET6, ip, port, scope);
  return true;
}

Status decodeAddressRecord(const uint8_t* p, size_t n, SocketAddress* out, std::string* why) {
  if (n != kAddressRecordBytes) return malformed(why, "address record has the wrong length");
  WireReader r(p, n);
  return decodeAddress(&r, out, why) ? ncclSuccess : ncclRemoteError;
}

// ------------------------------------------------------------------ bodies --

std::vector<uint8_t> encodeRootHello(const RootHello& m) {
  WireWriter w;
  w.u32(m.rank);
  w.u32(m.nranks);
  encodeAddress(m.listen, &w);
  return w.data();
}

std::vector<uint8_t> encodeRootReply(const RootReply& m) {
  WireWriter w;
  w.u32(m.successorRank);
  encodeAddress(m.successor, &w);
  return w.data();
}

std::vector<uint8_t> encodePeerHello(const PeerHello& m) {
  WireWriter w;
  w.u32(m.rank);
  w.u32(m.nranks);
  return w.data();
}

Status decodeRootHello(const uint8_t* p, size_t n, RootHello* out, std::string* why) {
  if (n != 8 + kAddressRecordBytes) return malformed(why, "root hello has the wrong length");
  WireReader r(p, n);
  RootHello m;
  if (!(r.u32(&m.rank) && r.u32(&m.nranks))) return malformed(why, "truncated root hello");
  if (m.nranks == 0 || m.nranks > kMaxRanks) return malformed(why, "nranks out of range");
  if (m.rank >= m.nranks) return malformed(why, "rank >= nranks");
  if (!decodeAddress(&r, &m.listen, why)) return ncclRemoteError;
  *out = m;
  return ncclSuccess;
}

Status decodeRootReply(const uint8_t* p, size_t n, RootReply* out, std::string* why) {
  if (n != 4 + kAddressRecordBytes) return malformed(why, "root reply has the wrong length");
  WireReader r(p, n);
  RootReply m;
  if (!r.u32(&m.successorRank)) return malformed(why, "truncated root reply");
  if (m.successorRank >= kMaxRanks) return malformed(why, "successor rank out of range");
  if (!decodeAddress(&r, &m.successor, why)) return ncclRemoteError;
  *out = m;
  return ncclSuccess;
}

Status decodePeerHello(const uint8_t* p, size_t n, PeerHello* out, std::string* why) {
  if (n != 8) return malformed(why, "peer hello has the wrong length");
  WireReader r(p, n);
  PeerHello m;
  if (!(r.u32(&m.rank) && r.u32(&m.nranks))) return malformed(why, "truncated peer hello");
  if (m.nranks == 0 || m.nranks > kMaxRanks) return malformed(why, "nranks out of range");
  if (m.rank >= m.nranks) return malformed(why, "rank >= nranks");
  *out = m;
  return ncclSuccess;
}

// --------------------------------------------------------------- unique id --

void encodeUniqueId(const UniqueIdInfo& info, ncclUniqueId* id) {
  WireWriter w;
  w.bytes(kIdTag, 4);
  w.u8(kUniqueIdVersion);
  w.u8(info.commIdMode ? 1 : 0);
  w.u16(0);
  w.u64(info.magic);
  encodeAddress(info.root, &w);
  memset(id->internal, 0, sizeof(id->internal));
  memcpy(id->internal, w.data().data(), w.data().size());
}

Status decodeUniqueId(const ncclUniqueId& id, UniqueIdInfo* out, std::string* why) {
  const auto* p = reinterpret_cast<const uint8_t*>(id.internal);
  WireReader r(p, sizeof(id.internal));
  uint8_t tag[4], version = 0, mode = 0;
  uint16_t reserved = 0;
  UniqueIdInfo info;
  if (!(r.bytes(tag, 4) && r.u8(&version) && r.u8(&mode) && r.u16(&reserved) &&
        r.u64(&info.magic))) {
    return malformed(why, "truncated unique id");
  }
  if (memcmp(tag, kIdTag, 4) != 0) return malformed(why, "not a Ferry unique id");
  if (version != kUniqueIdVersion) return malformed(why, "unsupported unique id version");
  if (mode > 1 || reserved != 0) return malformed(why, "bad unique id mode");
  if (info.magic == 0) return malformed(why, "unique id magic is 0");
  if (!decodeAddress(&r, &info.root, why)) return ncclRemoteError;
  while (r.remaining() > 0) {
    uint8_t b = 0;
    (void)r.u8(&b);
    if (b != 0) return malformed(why, "unique id padding is not zero");
  }
  info.commIdMode = mode == 1;
  *out = info;
  return ncclSuccess;
}

// Declared in bootstrap.h; lives here so the fuzz target needs only wire.cc.
std::string describeUniqueId(const ncclUniqueId& id) {
  UniqueIdInfo info;
  std::string why;
  if (decodeUniqueId(id, &info, &why) != ncclSuccess) return "<invalid unique id: " + why + ">";
  char magic[32];
  snprintf(magic, sizeof(magic), "%016" PRIx64, info.magic);
  return info.root.toString() + " magic=0x" + magic + (info.commIdMode ? " (NCCL_COMM_ID)" : "");
}

uint64_t magicFromCommId(const std::string& commId) {
  // FNV-1a over a domain-separated string, then a splitmix64 finalizer so
  // that similar strings give unrelated magics.
  uint64_t h = fnv1a("ferry-comm-id:" + commId);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

}  // namespace ferry::boot
