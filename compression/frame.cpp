#include "compression/frame.h"

#include <bit>
#include <cstring>
#include <string>

#include "src/base/bytes.h"
#include "src/base/hash.h"

namespace atl::compression {

static_assert(sizeof(StageId) == 1 && sizeof(DType) == 1 && sizeof(Rounding) == 1,
              "wire ids are one byte");

namespace {

// The cursor is src/base/bytes.h. A field that does not fit ends the parse with its name.
#define ATOLL_NEED(reader, n, field)          \
  if ((reader).remaining() < (n)) {          \
    (reader).take((n), (field));             \
    return corrupt((reader).error());        \
  }

using Writer = bytes::Writer<std::vector<uint8_t>>;

// A stage: its id, then its parameter families in flag order (chain.h: range checks).
void put_stage(Writer& w, const StageConfig& st) {
  w.u8(static_cast<uint8_t>(st.id));
  const uint8_t p = stage_params(st.id);
  if (p & kChunkParam) w.u32(static_cast<uint32_t>(st.chunk));
  if (p & kKeepParams) {
    w.u64(static_cast<uint64_t>(st.count));
    w.u64(std::bit_cast<uint64_t>(st.fraction));
  }
  if (p & kBlockParams) {
    w.u32(static_cast<uint32_t>(st.block));
    w.u8(static_cast<uint8_t>(st.rounding));
  }
  if (p & kLevelParam) w.u8(static_cast<uint8_t>(st.level));
}

// Reads stage `i`'s id and parameters. Range checks are validate_chain's job.
Status read_stage(bytes::Reader& r, int i, StageConfig* st) {
  ATOLL_NEED(r, 1, "stage id");
  const uint8_t raw = r.u8();
  if (!is_known_stage(raw)) {
    return corrupt("stage " + std::to_string(i + 1) + ": unknown stage id " + std::to_string(raw));
  }
  *st = StageConfig{};
  st->id = static_cast<StageId>(raw);
  ATOLL_NEED(r, stage_wire_bytes(st->id) - 1, "stage parameters");
  const uint8_t p = stage_params(st->id);
  if (p & kChunkParam) st->chunk = r.u32();
  if (p & kKeepParams) {
    const uint64_t count = r.u64();
    // Anything above the bound reads as out of range, without a signed overflow.
    st->count = count > static_cast<uint64_t>(kMaxElements) ? -1 : static_cast<int64_t>(count);
    st->fraction = std::bit_cast<double>(r.u64());
  }
  if (p & kBlockParams) {
    st->block = r.u32();
    st->rounding = static_cast<Rounding>(r.u8());
  }
  if (p & kLevelParam) st->level = r.u8();
  return Status::ok();
}

// Parses and validates every header field (not the checksum's value, not the payload).
Status parse_header(const uint8_t* bytes, size_t size, FrameHeader* h, size_t* header_size) {
  bytes::Reader r(bytes, size, "frame");
  ATOLL_NEED(r, 4, "magic");
  if (std::memcmp(bytes, kFrameMagic, 4) != 0) return corrupt("bad magic: not an atoll frame");
  r.u32();
  ATOLL_NEED(r, 1, "version");
  if (const uint8_t v = r.u8(); v != kFrameVersion) {
    return corrupt("unsupported frame version " + std::to_string(v) + " (this build reads " +
                   std::to_string(kFrameVersion) + ")");
  }
  ATOLL_NEED(r, 1, "flags");
  h->flags = r.u8();
  if (h->flags != 0) return corrupt("unknown frame flags " + std::to_string(h->flags));
  ATOLL_NEED(r, 1, "dtype");
  if (const uint8_t d = r.u8(); d != static_cast<uint8_t>(DType::kFp32)) {
    return corrupt("unknown dtype " + std::to_string(d));
  }
  h->dtype = DType::kFp32;

  ATOLL_NEED(r, 1, "stage count");
  const int count = r.u8();
  if (count > kMaxStages) {
    return corrupt("stage count " + std::to_string(count) + " above " + std::to_string(kMaxStages));
  }
  StageConfig raw[kMaxStages];
  for (int i = 0; i < count; ++i) {
    if (Status st = read_stage(r, i, &raw[i]); !st.is_ok()) return st;
  }
  if (Status st = validate_chain(raw, static_cast<size_t>(count)); !st.is_ok()) {
    return corrupt("stage chain: " + st.message());
  }
  h->chain = Chain{};
  for (int i = 0; i < count; ++i) {
    h->chain.stages[i] = canonical_stage(raw[i]);
    if (!same_stage(raw[i], h->chain.stages[i])) {
      return corrupt("stage " + std::to_string(i + 1) + " '" + stage_name(raw[i].id) +
                     "': parameters not in canonical form");
    }
  }
  h->chain.size = count;

  ATOLL_NEED(r, 8, "element count");
  h->elements = r.u64();
  if (h->elements > static_cast<uint64_t>(kMaxElements)) {
    return corrupt("element count " + std::to_string(h->elements) + " above the bound " +
                   std::to_string(kMaxElements));
  }
  ATOLL_NEED(r, 1, "ndim");
  h->ndim = r.u8();
  if (h->ndim < 1 || h->ndim > kMaxFrameDims) {
    return corrupt("ndim " + std::to_string(h->ndim) + " outside [1, " +
                   std::to_string(kMaxFrameDims) + "]");
  }
  ATOLL_NEED(r, 8 * static_cast<size_t>(h->ndim), "dims");
  bool zero = false;
  uint64_t product = 1;
  for (int d = 0; d < h->ndim; ++d) {
    h->dims[d] = r.u64();
    if (h->dims[d] > static_cast<uint64_t>(kMaxElements)) {
      return corrupt("dim " + std::to_string(d) + " = " + std::to_string(h->dims[d]) + " above the bound");
    }
    zero = zero || h->dims[d] == 0;
    if (!zero) {
      product *= h->dims[d];  // <= 2^31 * 2^31: no overflow before the check below
      if (product > static_cast<uint64_t>(kMaxElements)) return corrupt("shape holds more than 2^31 elements");
    }
  }
  if ((zero ? 0 : product) != h->elements) {
    return corrupt("shape holds " + std::to_string(zero ? 0 : product) + " elements, header says " +
                   std::to_string(h->elements));
  }
  ATOLL_NEED(r, 8, "seed");
  h->seed = r.u64();
  ATOLL_NEED(r, 8, "payload length");
  h->payload_size = r.u64();
  const PayloadBounds b = payload_bounds(h->chain, static_cast<int64_t>(h->elements));
  if (h->payload_size < b.min_payload || h->payload_size > b.max_payload) {
    return corrupt("payload length " + std::to_string(h->payload_size) + " impossible for " +
                   describe_chain(h->chain) + " of " + std::to_string(h->elements) +
                   " elements (expected " + std::to_string(b.min_payload) + ".." +
                   std::to_string(b.max_payload) + ")");
  }
  ATOLL_NEED(r, 8, "checksum");
  *header_size = r.pos() + 8;
  return Status::ok();
}

uint64_t frame_checksum(const uint8_t* frame, size_t header_size, const uint8_t* payload,
                        size_t payload_size) {
  return xxh64(frame, header_size - 8, payload, payload_size);
}

}  // namespace

size_t stage_wire_bytes(StageId id) {
  const uint8_t p = stage_params(id);
  return 1 + ((p & kChunkParam) ? 4 : 0) + ((p & kKeepParams) ? 16 : 0) + ((p & kBlockParams) ? 5 : 0) +
         ((p & kLevelParam) ? 1 : 0);
}

size_t begin_frame(const FrameHeader& h, std::vector<uint8_t>& out) {
  const size_t start = out.size();
  out.insert(out.end(), kFrameMagic, kFrameMagic + 4);
  Writer w(out);
  w.u8(kFrameVersion);
  w.u8(h.flags);
  w.u8(static_cast<uint8_t>(h.dtype));
  w.u8(static_cast<uint8_t>(h.chain.size));
  for (int i = 0; i < h.chain.size; ++i) put_stage(w, h.chain.stages[i]);
  w.u64(h.elements);
  w.u8(static_cast<uint8_t>(h.ndim));
  for (int d = 0; d < h.ndim; ++d) w.u64(h.dims[d]);
  w.u64(h.seed);
  w.u64(0);  // payload length, set by finish_frame
  w.u64(0);  // checksum, set by finish_frame
  return start;
}

void finish_frame(std::vector<uint8_t>& out, size_t start) {
  // Walk our own header to its end (it was written by begin_frame, so it is well formed).
  uint8_t* f = out.data() + start;
  size_t pos = kFramePrefixBytes;
  for (int i = 0; i < f[7]; ++i) pos += stage_wire_bytes(static_cast<StageId>(f[pos]));
  pos += 8;                            // element count
  pos += 1 + 8 * size_t{f[pos]};       // ndim, dims
  pos += 8;                            // seed
  const size_t header_size = pos + 16;
  const size_t payload_size = out.size() - start - header_size;
  bytes::put_at<uint64_t>(f, pos, payload_size);
  bytes::put_at<uint64_t>(f, pos + 8, frame_checksum(f, header_size, f + header_size, payload_size));
}

Status parse_frame(const uint8_t* bytes, size_t size, FrameView* view) {
  if (bytes == nullptr && size != 0) return corrupt("null frame");
  FrameView v;
  if (Status st = parse_header(bytes, size, &v.header, &v.header_size); !st.is_ok()) return st;
  const uint64_t declared = v.header.payload_size;
  const size_t available = size - v.header_size;
  if (available < declared) {
    return corrupt("truncated frame: header declares a " + std::to_string(declared) +
                   "-byte payload, " + std::to_string(available) + " bytes follow");
  }
  if (available > declared) {
    return corrupt("trailing bytes: header declares a " + std::to_string(declared) +
                   "-byte payload, " + std::to_string(available) + " bytes follow");
  }
  v.payload = bytes + v.header_size;
  v.frame_size = v.header_size + declared;
  const uint64_t want = bytes::get_at<uint64_t>(bytes, v.header_size - 8);
  const uint64_t got = frame_checksum(bytes, v.header_size, v.payload, declared);
  if (want != got) return corrupt("checksum mismatch: the frame was damaged in transit");
  *view = v;
  return Status::ok();
}

bool reseal_frame(uint8_t* bytes, size_t size) {
  FrameHeader h;
  size_t header_size = 0;
  if (!parse_header(bytes, size, &h, &header_size).is_ok()) return false;
  const size_t payload = size - header_size;
  bytes::put_at<uint64_t>(bytes, header_size - 8, frame_checksum(bytes, header_size, bytes + header_size, payload));
  return true;
}

}  // namespace atl::compression
