// GlooWire: the collectives::Wire of one collective on a mesh (mesh.h), on which GlooGroup
// runs collectives::attempt (rendezvous, hand-over and data phase, written once for every
// networked transport: transport/collectives/attempt.h) and collectives::hand_over.
//
// Blocking: ready() waits. Raw fp32 pieces go straight from and into the caller's memory;
// other payloads (compression frames, HELLO, RESULT_INFO, allgather bytes) travel as one
// message each behind a u64 (tag << 56 | length), since a gloo receive says neither how much
// arrived nor which of a rendezvous' answers it was.
//
// A frame that does not decode throws CorruptMessage. Mesh failures throw MeshBroken (mesh.h).
//
// Thread model: the group's worker thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "transport/collectives/program.h"
#include "transport/collectives/wire.h"
#include "transport/gloo/mesh.h"

namespace atl::transport::gloo_mesh {

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
  void data_phase(double bytes) override {
    if (on_data_phase) on_data_phase(bytes);
  }
  // Called when a data phase begins (GlooGroup starts its suspect timer).
  std::function<void(double)> on_data_phase;

 private:
  struct Recv {
    gloo_mesh::Wire::Message m;
    int from = -1;
    bool raw = false;
    bool done = false;
    collectives::Tag tag = collectives::Tag::kRing;
    uint8_t* dst = nullptr;
    size_t capacity = 0;
    std::vector<uint8_t> framed;  // not raw: u64 (tag << 56 | length), then the bytes
  };
  gloo_mesh::Wire& wire_;
  std::vector<gloo_mesh::Wire::Message> sends_;
  std::vector<std::vector<uint8_t>> framed_sends_;
  std::vector<Recv> recvs_;
};

// Runs a program over a GlooWire to its end; a frame that did not decode throws CorruptMessage.
void run(collectives::Program program, uint64_t seq);

}  // namespace atl::transport::gloo_mesh
