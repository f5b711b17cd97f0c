// run::run_identity: what the processes of one real run must share (the coordinator refuses a
// JOIN whose text differs), and what may differ between them (where each runs and writes).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/config/config.h"
#include "src/run/run_identity.h"

namespace atl::run {
namespace {

const char* kYaml =
    "run: {name: r, seed: 5}\n"
    "model: {name: gpt, layers: 1, heads: 2, dim: 32, seq_len: 16}\n"
    "data: {kind: text, path: corpus.txt}\n"
    "islands: {count: 3}\n"
    "algorithm: {name: diloco, inner_steps: 5}\n"
    "compression: [{quantize: int8}]\n";

std::string identity(const std::vector<std::string>& sets) {
  return run_identity(config::parse_config(kYaml, "c.yaml", sets));
}

TEST(RunIdentity, WhereAProcessRunsAndWritesMayDiffer) {
  const std::string base = identity({});
  EXPECT_EQ(identity({"run.out_dir=/elsewhere", "run.threads=1", "run.device=cuda:1", "run.resume=true",
                      "transport.coordinator=tcp://10.0.0.9:4000", "transport.host=10.0.0.2", "transport.keys_dir=/k",
                      "data.path=/mnt/other/corpus.txt", "model.init_from=/mnt/w", "checkpoint.dir=/ckpt",
                      "checkpoint.keep=9", "hosts.coordinator=h0", "hosts.islands=[h1, h2, h3]"}),
            base);
  for (const char* absent : {"run.out_dir", "transport.coordinator", "data.path", "hosts.", "checkpoint.keep"}) {
    EXPECT_EQ(base.find(absent), std::string::npos) << absent;
  }
}

TEST(RunIdentity, WhatTheRunComputesMayNot) {
  const std::string base = identity({});
  EXPECT_NE(base.find("algorithm.outer_lr: 0.7\n"), std::string::npos) << base;
  EXPECT_NE(base.find("run.name: r\n"), std::string::npos) << base;
  for (const char* set : {"algorithm.outer_lr=0.5", "run.name=other", "run.seed=6", "islands.count=4",
                          "model.dim=64", "train.lr=0.01", "compression=[{quantize: fp16}]", "checkpoint.every=10",
                          "transport.kind=gloo", "transport.base_port=30000"}) {
    EXPECT_NE(identity({set}), base) << set;
  }
  const std::string other = identity({"algorithm.outer_lr=0.5"});
  EXPECT_NE(other.find("algorithm.outer_lr: 0.5\n"), std::string::npos) << other;
}

}  // namespace
}  // namespace atl::run
