// libFuzzer target: arbitrary bytes into every bootstrap wire decoder.
//
// Properties checked beyond "no crash, no sanitizer report": whatever a
// decoder accepts re-encodes to exactly the input bytes (the encodings are
// canonical), and decoded values satisfy the documented invariants.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "bootstrap/wire.h"

namespace {

using namespace ferry::boot;

constexpr uint64_t kFixedMagic = 0x0123456789abcdefull;

void require(bool cond) {
  if (!cond) __builtin_trap();
}

void fuzzHeader(const uint8_t* data, size_t size, uint64_t magic) {
  FrameHeader h;
  std::string why;
  if (decodeFrameHeader(data, size, magic, &h, &why) != ncclSuccess) return;
  require(size >= kFrameHeaderBytes && h.magic == magic && h.payloadLength <= kMaxFramePayload &&
          isKnownFrameType(static_cast<uint32_t>(h.type)) && h.srcRank < kMaxRanks);
  uint8_t again[kFrameHeaderBytes];
  encodeFrameHeader(h, again);
  require(memcmp(again, data, kFrameHeaderBytes) == 0);
}

template <typename Msg, typename Decode, typename Encode>
void fuzzBody(const uint8_t* data, size_t size, Decode decode, Encode encode) {
  Msg m;
  std::string why;
  if (decode(data, size, &m, &why) != ncclSuccess) return;
  auto again = encode(m);
  require(again.size() == size && memcmp(again.data(), data, size) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzzHeader(data, size, kFixedMagic);
  if (size >= 8) {
    uint64_t magic = 0;
    for (int i = 7; i >= 0; --i) magic = (magic << 8) | data[i];
    fuzzHeader(data, size, magic);
  }
  fuzzBody<RootHello>(data, size, decodeRootHello, encodeRootHello);
  fuzzBody<RootReply>(data, size, decodeRootReply, encodeRootReply);
  fuzzBody<PeerHello>(data, size, decodePeerHello, encodePeerHello);
  {
    SocketAddress a;
    if (decodeAddressRecord(data, size, &a) == ncclSuccess) {
      require(a.valid() && a.port() != 0);
      WireWriter w;
      encodeAddress(a, &w);
      require(w.data().size() == size && memcmp(w.data().data(), data, size) == 0);
      (void)a.toString();
    }
  }
  {
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));
    UniqueIdInfo info;
    if (decodeUniqueId(id, &info) == ncclSuccess) {
      require(info.magic != 0 && info.root.valid());
      ncclUniqueId again;
      encodeUniqueId(info, &again);
      require(memcmp(&again, &id, sizeof(id)) == 0);
      (void)describeUniqueId(id);
    }
  }
  // A reader walking the input as a stream of little-endian fields.
  WireReader r(data, size);
  uint64_t v64;
  uint32_t v32;
  uint16_t v16;
  uint8_t v8;
  while (r.u8(&v8) && r.u16(&v16) && r.u32(&v32) && r.u64(&v64)) {
  }
  require(r.remaining() <= size);
  return 0;
}
