// Tests for src/config's list and record sections: the compression list of stages and the WAN
// model's events, links and regions (parsing, round trip through to_yaml, errors that name
// the line and the key). Split from config_test.cpp, which holds the key-by-key sections.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"

// ---- compression: list of stages ---------------------------------------------------------
namespace atl::config {
namespace {

TEST(CompressionConfig, ParsesStagesAndRoundTrips) {
  Config c = parse_config(
      "compression:\n"
      "  - {quantize: int4, block: 64, rounding: stochastic}\n"
      "  - {zstd: 5}\n",
      "c.yaml");
  ASSERT_EQ(c.compression.size(), 2u);
  EXPECT_EQ(c.compression[0].op, "quantize");
  EXPECT_EQ(c.compression[0].format, "int4");
  EXPECT_EQ(c.compression[0].block, 64);
  EXPECT_EQ(c.compression[0].rounding, "stochastic");
  EXPECT_EQ(c.compression[1].op, "zstd");
  EXPECT_EQ(c.compression[1].level, 5);
  Config back = parse_config(to_yaml(c), "back.yaml");
  EXPECT_EQ(back.compression, c.compression);
  EXPECT_EQ(to_yaml(back), to_yaml(c));

  Config t = parse_config("compression: [{topk: 0.01}, {randk: 1000}, {dct: }]\n", "t.yaml");
  ASSERT_EQ(t.compression.size(), 3u);
  EXPECT_DOUBLE_EQ(t.compression[0].fraction, 0.01);
  EXPECT_EQ(t.compression[1].count, 1000);
  EXPECT_EQ(t.compression[2].chunk, 64);
  EXPECT_EQ(parse_config(to_yaml(t), "t2").compression, t.compression);
}

std::string compression_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "c.yaml", sets);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(CompressionConfig, ErrorsNameLineStageAndSuggest) {
  EXPECT_EQ(compression_error("compression:\n  - {quantize: int3}\n"),
            "c.yaml:2: key 'compression[0].quantize': unknown format 'int3' (valid: fp16, bf16, "
            "int8, int4, fp4, fp8, lut2) (did you mean 'int8'?)");  // ties: first listed
  EXPECT_NE(compression_error("compression:\n  - {quantise: int4}\n").find("did you mean 'quantize'"),
            std::string::npos);
  EXPECT_NE(compression_error("compression:\n  - {quantize: int4, blok: 3}\n")
                .find("did you mean 'compression[0].block'"),
            std::string::npos);
  EXPECT_NE(compression_error("compression:\n  - {zstd: 30}\n").find("compression[0].zstd"), std::string::npos);
  EXPECT_NE(compression_error("compression:\n  - {topk: 1.5}\n").find("fraction in (0, 1)"), std::string::npos);
  EXPECT_NE(compression_error("compression: {zstd: 3}\n").find("expected a list of stages"), std::string::npos);
  EXPECT_NE(compression_error("compresion: []\n").find("did you mean 'compression'"), std::string::npos);
}

TEST(CompressionConfig, OverrideReplacesTheList) {
  Config c = parse_config("compression: [{zstd: 3}]\n", "c.yaml", {"compression=[{quantize: fp8}]"});
  ASSERT_EQ(c.compression.size(), 1u);
  EXPECT_EQ(c.compression[0].format, "fp8");
  EXPECT_NE(compression_error("", {"compression=[{quantize: int9}]"}).find("--set compression="),
            std::string::npos);
  Config none = parse_config("compression: [{zstd: 3}]\n", "c.yaml", {"compression=[]"});
  EXPECT_TRUE(none.compression.empty());
}

// ---- islands.events, compute, network (simulator and WAN profile) --------------------------

constexpr const char* kWan =
    "islands:\n"
    "  count: 4\n"
    "  events:\n"
    "    - {kill: 2, at_step: 100}\n"
    "    - {rejoin: 2, at_time_s: 30.5}\n"
    "    - {add: 1, at_time_s: 40}\n"
    "    - {partition: [us, eu], at_time_s: 50, duration_s: 30}\n"
    "compute:\n"
    "  step_time_s: 0.25\n"
    "  speeds: [1, 0.5, 2, 1.5]\n"
    "network:\n"
    "  bandwidth_mbps: 1000\n"
    "  regions: [us, us, eu, asia]\n"
    "  links:\n"
    "    - {between: [us, eu], latency_ms: 40, bandwidth_mbps: 500}\n"
    "    - {between: [eu, asia], latency_ms: 90, loss: 0.001}\n"
    "  server_region: eu\n";

TEST(WanConfig, ParsesEventsSpeedsRegionsAndLinks) {
  const Config c = parse_config(kWan, "w.yaml");
  ASSERT_EQ(c.islands.events.size(), 4u);
  EXPECT_EQ(c.islands.events[0].kill, 2);
  EXPECT_EQ(c.islands.events[0].at_step, 100);
  EXPECT_EQ(c.islands.events[1].rejoin, 2);
  EXPECT_EQ(c.islands.events[1].at_time_s, 30.5);
  EXPECT_EQ(c.islands.events[2].add, 1);
  EXPECT_EQ(c.islands.events[3].partition, (std::vector<std::string>{"us", "eu"}));
  EXPECT_EQ(c.islands.events[3].duration_s, 30);
  EXPECT_EQ(c.compute.speeds, (std::vector<double>{1, 0.5, 2, 1.5}));
  EXPECT_EQ(c.network.regions, (std::vector<std::string>{"us", "us", "eu", "asia"}));
  ASSERT_EQ(c.network.links.size(), 2u);
  EXPECT_EQ(c.network.links[0].bandwidth_mbps, 500);
  EXPECT_EQ(c.network.links[1].latency_ms, 90);
  EXPECT_EQ(c.network.links[1].loss, 0.001);
  EXPECT_EQ(c.network.links[1].bandwidth_mbps, -1);  // not set: no cap
  // Round trip through to_yaml.
  const Config back = parse_config(to_yaml(c), "back.yaml");
  EXPECT_EQ(back.islands.events, c.islands.events);
  EXPECT_EQ(back.network.links, c.network.links);
  EXPECT_EQ(back.network.regions, c.network.regions);
  EXPECT_EQ(back.compute.speeds, c.compute.speeds);
  EXPECT_EQ(to_yaml(back), to_yaml(c));
}

std::string wan_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "w.yaml", sets);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(WanConfig, ErrorsNameTheKey) {
  EXPECT_EQ(wan_error("islands:\n  events:\n    - {kil: 1, at_step: 3}\n"),
            "w.yaml:2: key 'islands.events': events[0]: unknown key 'kil' (did you mean 'kill'?)");
  EXPECT_NE(wan_error("islands:\n  events:\n    - {kill: 1}\n").find("exactly one of at_step, at_time_s"),
            std::string::npos);
  EXPECT_NE(wan_error("islands:\n  events:\n    - {kill: 1, rejoin: 1, at_step: 3}\n")
                .find("exactly one of kill, rejoin, add, partition"),
            std::string::npos);
  EXPECT_NE(wan_error("islands:\n  events:\n    - {rejoin: 1, at_step: 3}\n").find("use at_time_s"),
            std::string::npos);
  EXPECT_NE(wan_error("islands:\n  events:\n    - {kill: 9, at_step: 3}\n").find("island 9 does not exist"),
            std::string::npos);
  EXPECT_NE(wan_error("islands:\n  events:\n    - {kill: 1, at_step: -3}\n").find("events[0].at_step: must be >= 0"),
            std::string::npos);
  EXPECT_NE(wan_error("compute:\n  speeds: [1, 2]\n").find("compute.speeds': has 2 entries"),
            std::string::npos);
  EXPECT_NE(wan_error("compute:\n  speeds: [1, 2, 0, 1]\n").find("speeds[2]: must be > 0"),
            std::string::npos);
  EXPECT_NE(wan_error("network:\n  regions: [us, us, eu, eu]\n  links:\n    - {between: [us, ue]}\n")
                .find("unknown region 'ue' (regions: eu, us) (did you mean 'eu'?)"),
            std::string::npos);
  EXPECT_NE(wan_error("network:\n  regions: [a, a, b, b]\n  links:\n    - {between: [a]}\n")
                .find("expected two region names"),
            std::string::npos);
  EXPECT_NE(wan_error("network:\n  links: {between: [a, b]}\n").find("expected a list of entries"),
            std::string::npos);
  EXPECT_NE(wan_error("", {"network.regions=[x, y, z, x]", "network.server_region=w"})
                .find("network.server_region': unknown region 'w'"),
            std::string::npos);
  EXPECT_EQ(wan_error("", {"islands.events=[{kill: 0, at_time_s: 1.5}]"}), "");
}

}  // namespace
}  // namespace atl::config
