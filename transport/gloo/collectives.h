// What GlooGroup runs over a mesh's point-to-point messages (mesh.h), besides the schedules
// themselves, which are transport/collectives/schedules.h run over GlooWire:
//
//   - GlooWire: the collectives::Wire of one collective on a mesh. Blocking: ready() waits.
//     Raw fp32 pieces go straight from and into the caller's memory; other payloads
//     (compression frames, allgather bytes) travel as one message each, a u64 length and
//     then the bytes, since a gloo receive does not say how much arrived.
//   - HELLO: before any data, the participants exchange what they issued (kind, root, size,
//     weight, codec fingerprint, ring piece length), so that they agree on the weights and
//     the data-phase timeout starts only once everyone has arrived.
//   - result hand-over: a finished collective's values (raw fp32) and outcome, from the
//     member that kept them to one that did not finish it (GlooGroup's restarts).
//
// A frame that does not decode throws CorruptMessage. Mesh failures throw MeshBroken (mesh.h).
//
// Thread model: the group's worker thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/schedules.h"
#include "transport/gloo/mesh.h"
#include "transport/group.h"

namespace atl::transport::gloo_mesh {

// What a member issued as one collective (40 bytes on the wire, little-endian).
struct Hello {
  uint8_t kind = 0;          // 1 all-reduce, 2 broadcast, 3 allgather
  int32_t root = -1;         // broadcast root
  uint64_t numel = 0;        // elements (allgather: this member's bytes)
  double weight = 1;
  uint64_t codec = 0;        // collectives::codec_fingerprint()
  uint64_t piece_elems = 0;  // ring piece length
  bool operator==(const Hello&) const = default;
};

// Sends `mine` to every other participant; returns every participant's, by position in `parts`.
std::vector<Hello> exchange_hello(Wire& wire, const std::vector<int>& parts, const Hello& mine);

// The collectives::Wire of one collective on a mesh (see the file comment). Runs the
// programs of transport/collectives/schedules.h to their end in one resume().
class GlooWire final : public collectives::Wire {
 public:
  explicit GlooWire(gloo_mesh::Wire& wire) : wire_(wire) {}
  int self() const override { return wire_.self(); }
  bool raw_fp32() const override { return true; }
  void send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
            bool raw) override;
  collectives::RecvId post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                bool raw) override;
  bool ready(collectives::RecvId id) override;
  collectives::Payload take(collectives::RecvId id) override;
  bool sent() override;

 private:
  struct Recv {
    gloo_mesh::Wire::Message m;
    int from = -1;
    bool raw = false;
    bool done = false;
    uint8_t* dst = nullptr;
    size_t capacity = 0;
    std::vector<uint8_t> framed;  // not raw: u64 length, then the bytes
  };
  gloo_mesh::Wire& wire_;
  std::vector<gloo_mesh::Wire::Message> sends_;
  std::vector<std::vector<uint8_t>> framed_sends_;
  std::vector<Recv> recvs_;
};

// Runs a schedule over a GlooWire to its end; a frame that did not decode throws CorruptMessage.
void run(collectives::Program program, uint64_t seq);

// Hand-over: `values` ([n] float32) and the outcome of a finished collective, to `to`.
void send_result(Wire& wire, int to, const CollectiveResult& result, const at::Tensor& values);
// Receives them from `from` into `buffer`; returns the outcome.
CollectiveResult receive_result(Wire& wire, int from, at::Tensor buffer);
// The same for a finished allgather: its outcome and every contributor's bytes.
void send_gathered(Wire& wire, int to, const CollectiveResult& result,
                   const std::vector<std::vector<uint8_t>>& gathered);
CollectiveResult receive_gathered(Wire& wire, int from, std::vector<std::vector<uint8_t>>& gathered);

}  // namespace atl::transport::gloo_mesh
