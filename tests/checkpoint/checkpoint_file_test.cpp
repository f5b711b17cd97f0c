// src/checkpoint: the file format (round trip, every refusal), the directory (keep K, fall
// back past corrupt and truncated files) and atomicity against real processes killed with
// SIGKILL: by the fault-injection point mid-write, and from outside at random instants.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/base/hash.h"
#include "src/base/bytes.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/checkpoint/checkpoint_file.h"

namespace fs = std::filesystem;

namespace atl::checkpoint {
namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("atoll_ckpt_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Sections whose payloads depend on `step`, so that a checkpoint says which step it holds.
std::vector<Section> sections_of(int64_t step, size_t big = 1000) {
  bytes::ByteWriter meta;
  meta.i64(step);
  meta.f64(0.5 * static_cast<double>(step));
  meta.str("hello");
  std::string blob(big, '\0');
  for (size_t i = 0; i < big; ++i) blob[i] = static_cast<char>((i * 131 + static_cast<size_t>(step)) & 0xff);
  return {{"meta", std::move(meta).bytes()}, {"blob", std::move(blob)}, {"empty", ""}};
}
int64_t step_in(const Checkpoint& c) {
  const std::string* meta = c.find("meta");
  if (meta == nullptr) return -1;
  bytes::Reader r(*meta);
  return r.i64();
}

TEST(CheckpointBytes, RoundTripAndOverrun) {
  bytes::ByteWriter w;
  w.u8(7);
  w.u32(0xdeadbeef);
  w.u64(1ULL << 60);
  w.i64(-5);
  w.f64(-0.0);
  w.boolean(true);
  w.str("abc");
  w.i64s({1, -2, 3});
  w.f64s({0.25, 1e300});
  // Little-endian on the page, whatever the host.
  EXPECT_EQ(w.bytes().substr(1, 4), std::string("\xef\xbe\xad\xde", 4));
  bytes::Reader r(w.bytes());
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), 1ULL << 60);
  EXPECT_EQ(r.i64(), -5);
  const double z = r.f64();
  EXPECT_TRUE(z == 0.0 && std::signbit(z));
  EXPECT_TRUE(r.boolean());
  EXPECT_EQ(r.str(), "abc");
  EXPECT_EQ(r.i64s(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(r.f64s(), (std::vector<double>{0.25, 1e300}));
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.u64(), 0u);  // past the end: zero, and remembered
  EXPECT_FALSE(r.ok());
  bytes::Reader huge(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  EXPECT_TRUE(huge.str().empty());
  EXPECT_FALSE(huge.ok());
}

TEST(CheckpointFile, RoundTripAndLayout) {
  const auto secs = sections_of(42);
  const std::string bytes = encode(secs);
  // Header: magic, version 2, 3 sections, checksum of the 16 bytes before.
  ASSERT_GE(bytes.size(), kHeaderBytes + kFooterBytes);
  EXPECT_EQ(bytes.substr(0, 8), "ATOLLCKP");
  EXPECT_EQ(bytes.substr(8, 8), std::string("\x02\0\0\0\x03\0\0\0", 8));
  bytes::Reader h(std::string_view(bytes).substr(16, 8));
  EXPECT_EQ(h.u64(), xxh3_64(bytes.data(), 16));
  // First section: u32 4, u32 0, u64 payload size, "meta", payload, checksum.
  bytes::Reader s(std::string_view(bytes).substr(24));
  EXPECT_EQ(s.u32(), 4u);
  EXPECT_EQ(s.u32(), 0u);
  EXPECT_EQ(s.u64(), secs[0].data.size());
  EXPECT_EQ(bytes.substr(40, 4), "meta");
  bytes::Reader sum(std::string_view(bytes).substr(44 + secs[0].data.size(), 8));
  EXPECT_EQ(sum.u64(), xxh3_64(secs[0].data.data(), secs[0].data.size(), xxh3_64(bytes.data() + 24, 20)));
  // Footer: magic and the file's size.
  EXPECT_EQ(bytes.substr(bytes.size() - 24, 8), "ATOLLEND");
  bytes::Reader f(std::string_view(bytes).substr(bytes.size() - 16, 8));
  EXPECT_EQ(f.u64(), bytes.size());

  StatusOr<Checkpoint> c = decode(bytes, "x");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ASSERT_EQ(c->sections().size(), 3u);
  for (size_t i = 0; i < secs.size(); ++i) {
    EXPECT_EQ(c->sections()[i].name, secs[i].name);
    EXPECT_EQ(c->sections()[i].data, secs[i].data);
  }
  EXPECT_EQ(step_in(*c), 42);
  EXPECT_EQ(c->find("nope"), nullptr);
  ASSERT_NE(c->find("empty"), nullptr);
  EXPECT_TRUE(c->find("empty")->empty());
}

TEST(CheckpointFile, RefusesBadNames) {
  EXPECT_THROW(encode({{"", "x"}}), std::invalid_argument);
  EXPECT_THROW(encode({{"has space", "x"}}), std::invalid_argument);
  EXPECT_THROW(encode({{std::string(256, 'a'), "x"}}), std::invalid_argument);
  EXPECT_THROW(encode({{"a", "x"}, {"a", "y"}}), std::invalid_argument);
}

// Every way a file can be damaged is refused with one line that says what is wrong.
TEST(CheckpointFile, RefusesEveryDamageWithOneLine) {
  const std::string good = encode(sections_of(7));
  auto refused = [&](const std::string& bytes, const std::string& why) {
    StatusOr<Checkpoint> c = decode(bytes, "checkpoint 'f'");
    ASSERT_FALSE(c.is_ok()) << why;
    EXPECT_EQ(c.status().code(), StatusCode::kCorrupt) << why;
    const std::string& m = c.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("checkpoint 'f': ", 0), 0u) << m;
    EXPECT_NE(m.find(why), std::string::npos) << "expected '" << why << "' in: " << m;
  };
  refused("", "truncated");
  refused(good.substr(0, 30), "truncated");
  // Cut anywhere: refused (every length from the header's end to one byte short).
  for (size_t n = kHeaderBytes + kFooterBytes; n < good.size(); n += 37) {
    StatusOr<Checkpoint> c = decode(good.substr(0, n), "f");
    EXPECT_FALSE(c.is_ok()) << "cut at " << n;
  }
  refused(good.substr(0, good.size() - 1), "truncated");
  std::string bad = good;
  bad[0] = 'X';
  refused(bad, "bad magic");
  bad = good;
  bad[8] = 1;  // version 1, before named state (the header checksum is then wrong too: fix it up)
  {
    bytes::ByteWriter w;
    w.u64(xxh3_64(bad.data(), 16));
    bad.replace(16, 8, w.bytes());
  }
  refused(bad, "version 1 is not readable by this atoll (it reads version 2)");
  bad = good;
  bad[12] = 9;
  refused(bad, "header checksum");
  bad = good;
  bad[100] ^= 0x10;  // inside the first section's payload or the blob
  refused(bad, "checksum mismatch in section");
  bad = good;
  bad += std::string(5, 'z');
  refused(bad, "truncated or unsealed");
}

TEST(CheckpointFile, WriteReadAndMissing) {
  const fs::path dir = scratch("wr");
  const std::string path = (dir / "a.ckpt").string();
  ASSERT_TRUE(write_checkpoint(path, sections_of(3)).is_ok());
  StatusOr<Checkpoint> c = read_checkpoint(path);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(step_in(*c), 3);
  // Overwriting replaces it whole; no temporary file stays behind.
  ASSERT_TRUE(write_checkpoint(path, sections_of(4)).is_ok());
  EXPECT_EQ(step_in(*read_checkpoint(path)), 4);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_EQ(read_checkpoint((dir / "none.ckpt").string()).status().code(), StatusCode::kNotFound);
  // A directory that cannot be written: an error, not a crash.
  Status s = write_checkpoint((dir / "no" / "such" / "x.ckpt").string(), sections_of(1));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s.message();
}

TEST(CheckpointDir, KeepsTheLastKAndFallsBack) {
  const fs::path dir = scratch("dir");
  CheckpointDir d((dir / "checkpoints").string(), 3);
  EXPECT_TRUE(d.list().empty());
  EXPECT_EQ(d.load_latest(nullptr).status().code(), StatusCode::kNotFound);
  for (int64_t step : {10, 20, 30, 40, 50}) ASSERT_TRUE(d.save(step, sections_of(step)).is_ok());
  std::vector<Entry> all = d.list();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].step, 30);
  EXPECT_EQ(all[2].step, 50);
  EXPECT_EQ(fs::path(all[2].path).filename(), "step-000000000050.ckpt");

  std::vector<std::string> lines;
  auto note = [&](const std::string& l) { lines.push_back(l); };
  StatusOr<Loaded> l = d.load_latest(note);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->step, 50);
  EXPECT_EQ(step_in(l->checkpoint), 50);
  EXPECT_TRUE(lines.empty());

  // The newest truncated, the one before it with a flipped byte: both refused, one line
  // each, and the oldest is used.
  std::string b = slurp(all[2].path);
  spit(all[2].path, b.substr(0, b.size() / 2));
  b = slurp(all[1].path);
  b[b.size() / 2] ^= 1;
  spit(all[1].path, b);
  l = d.load_latest(note);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->step, 30);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("step-000000000050.ckpt': truncated"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("falling back to the previous checkpoint"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("step-000000000040.ckpt"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("mismatch"), std::string::npos) << lines[1];
  // None left: not found, and the last refusal says so.
  spit(all[0].path, "junk");
  lines.clear();
  EXPECT_EQ(d.load_latest(note).status().code(), StatusCode::kNotFound);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("no older checkpoint"), std::string::npos) << lines[2];
  // Names that are not checkpoints are ignored.
  spit(dir / "checkpoints" / "step-12.ckpt", "x");
  spit(dir / "checkpoints" / "notes.txt", "x");
  EXPECT_EQ(d.list().size(), 3u);
}

// --- real processes ------------------------------------------------------------------------

// The body of the child processes: run only when the parent test sets ATOLL_CKPT_CHILD_DIR.
// It saves checkpoints 1, 2, 3, ... (large enough that a write takes a while) to that
// directory until it is killed or reaches ATOLL_CKPT_CHILD_STEPS.
TEST(CheckpointChild, Writes) {
  const char* dir = std::getenv("ATOLL_CKPT_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of the kill tests";
  const char* steps = std::getenv("ATOLL_CKPT_CHILD_STEPS");
  const int64_t last = steps ? std::atoll(steps) : 1000000;
  CheckpointDir d(dir, 2);
  for (int64_t step = 1; step <= last; ++step) ASSERT_TRUE(d.save(step, sections_of(step, 4 << 20)).is_ok());
}

// Starts this test binary as the child above; returns its pid.
pid_t start_child(const fs::path& dir, const std::string& fault, int64_t steps) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("ATOLL_CKPT_CHILD_DIR", dir.c_str(), 1);
    ::setenv("ATOLL_CKPT_CHILD_STEPS", std::to_string(steps).c_str(), 1);
    if (!fault.empty()) ::setenv("ATOLL_CHECKPOINT_FAULT", fault.c_str(), 1);
    else ::unsetenv("ATOLL_CHECKPOINT_FAULT");
    FILE* quiet = std::freopen("/dev/null", "w", stdout);  // the child's gtest banner
    (void)quiet;
    ::execl("/proc/self/exe", "checkpoint_test", "--gtest_filter=CheckpointChild.Writes", nullptr);
    ::_exit(127);
  }
  return pid;
}

TEST(CheckpointKill, FaultInjectionKillsMidWriteAndThePreviousCheckpointIsUsed) {
  const fs::path dir = scratch("fault");
  const pid_t pid = start_child(dir, "kill_mid_write:3", 5);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was to die of SIGKILL in its third write";
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  // Checkpoints 1 and 2 complete, 3 only as a half-written temporary file.
  CheckpointDir d(dir.string(), 2);
  std::vector<Entry> all = d.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].step, 2);
  const fs::path tmp = dir / ".step-000000000003.ckpt.tmp";
  ASSERT_TRUE(fs::exists(tmp));
  EXPECT_GT(fs::file_size(tmp), 0u);
  EXPECT_LT(fs::file_size(tmp), fs::file_size(all[1].path));
  std::vector<std::string> lines;
  StatusOr<Loaded> l = d.load_latest([&](const std::string& s) { lines.push_back(s); });
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->step, 2);
  EXPECT_EQ(step_in(l->checkpoint), 2);
  EXPECT_TRUE(lines.empty());
  // The next save (a resumed run) clears the leftover.
  ASSERT_TRUE(d.save(3, sections_of(3)).is_ok());
  EXPECT_FALSE(fs::exists(tmp));
}

// SIGKILL from outside at random instants while the child writes checkpoints back to back:
// whatever the instant, the directory holds only whole checkpoints, the newest readable.
TEST(CheckpointKill, KilledAtRandomInstantsLeavesOnlyWholeCheckpoints) {
  std::mt19937 rng(12345);
  int with_checkpoint = 0;
  for (int round = 0; round < 6; ++round) {
    const fs::path dir = scratch("random" + std::to_string(round));
    const pid_t pid = start_child(dir, "", 1000000);
    ASSERT_GT(pid, 0);
    // Once it writes (its start-up time varies with the machine's load), a random instant.
    CheckpointDir d(dir.string(), 2);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (d.list().empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    for (const Entry& e : d.list()) {
      StatusOr<Checkpoint> c = read_checkpoint(e.path);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      EXPECT_EQ(step_in(*c), e.step);
    }
    std::vector<std::string> lines;
    StatusOr<Loaded> l = d.load_latest([&](const std::string& s) { lines.push_back(s); });
    EXPECT_TRUE(lines.empty());
    if (l.is_ok()) {
      ++with_checkpoint;
      EXPECT_EQ(l->step, d.list().back().step);
    }
  }
  EXPECT_GT(with_checkpoint, 0) << "no child lived long enough to write a checkpoint";
}

}  // namespace
}  // namespace atl::checkpoint
