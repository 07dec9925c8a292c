// 16 parallel add-native into one overlay, 20 trials ($OVERLAY_CONCURRENCY_TRIALS): every entry
// recorded, one revert restores all; revert and gc-stale racing on the same overlay: no damage.
#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

TEST(Concurrency, SixteenParallelAddsLoseNothingRevertAndGcRace) {
  const char* env = std::getenv("OVERLAY_CONCURRENCY_TRIALS");
  const int trials = env ? std::atoi(env) : 20;
  int entries_seen = 0;
  for (int trial = 0; trial < trials; ++trial) {
    TempDir t;
    std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};
    for (int i = 0; i < 16; ++i) {
      write_file(t / "inst" / ("k" + std::to_string(i) + ".cpp"), "original " + std::to_string(i) + "\n");
      write_file(t / "p" / ("k" + std::to_string(i) + ".cpp"), "patched " + std::to_string(i) + "\n");
    }
    std::string before = tree_digest(t / "inst");
    std::vector<pid_t> pids;
    for (int i = 0; i < 16; ++i) {
      std::string k = "k" + std::to_string(i) + ".cpp";
      pids.push_back(
          spawn_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", (t / "inst" / k).string(),
                         "--patched-file", (t / "p" / k).string(), "--build-cmd", "true"},
                        state));
    }
    for (pid_t p : pids) EXPECT_EQ(wait_rc(p), 0) << "trial " << trial;
    json m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
    EXPECT_EQ(m["natives"].size(), 16u) << "trial " << trial;
    entries_seen += static_cast<int>(m["natives"].size());
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(read_file(t / "inst" / ("k" + std::to_string(i) + ".cpp")), "patched " + std::to_string(i) + "\n");
    pid_t a = spawn_overlay({"revert", "--overlay", (t / "ov").string()}, state);
    pid_t b = spawn_overlay({"gc-stale", "--root", t.path().string()}, state);
    EXPECT_EQ(wait_rc(a), 0);
    EXPECT_EQ(wait_rc(b), 0);
    EXPECT_EQ(tree_digest(t / "inst"), before) << "trial " << trial;
    EXPECT_TRUE(json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"].empty());
  }
  std::printf("concurrency: %d trials x 16 parallel add-native: %d of %d entries recorded\n", trials, entries_seen,
              trials * 16);
}

// 8 parallel `apply` of mixed diffs (a C++ file and a Python module each) into one overlay, and
// 4 `revert --patch-id` racing each other afterwards: every patch recorded whole, every one
// removed whole.
TEST(Concurrency, ParallelAppliesRecordWholePatches) {
  const char* env = std::getenv("OVERLAY_CONCURRENCY_TRIALS");
  const int trials = std::max(1, (env ? std::atoi(env) : 20) / 4);
  constexpr int kPatches = 8;
  for (int trial = 0; trial < trials; ++trial) {
    TempDir t;
    std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};
    write_file(t / "inst/pkg/__init__.py", "");
    for (int i = 0; i < kPatches; ++i) {
      std::string n = std::to_string(i);
      write_file(t / "inst/csrc" / ("k" + n + ".cpp"), "int k" + n + "() { return 4; }\n");
      write_file(t / "inst/pkg" / ("m" + n + ".py"), "V = 4\n");
      write_file(t / ("d" + n + ".diff"), "--- a/csrc/k" + n + ".cpp\n+++ b/csrc/k" + n + ".cpp\n@@ -1 +1 @@\n-int k" +
                                              n + "() { return 4; }\n+int k" + n + "() { return 7; }\n--- a/pkg/m" + n +
                                              ".py\n+++ b/pkg/m" + n + ".py\n@@ -1 +1 @@\n-V = 4\n+V = 7\n");
    }
    std::string before = tree_digest(t / "inst");
    std::vector<pid_t> pids;
    for (int i = 0; i < kPatches; ++i)
      pids.push_back(spawn_overlay(
          {"apply", "--overlay", (t / "ov").string(), "--patch", (t / ("d" + std::to_string(i) + ".diff")).string(),
           "--patch-root", (t / "inst").string(), "--build-cmd", "true"},
          state));
    for (pid_t p : pids) EXPECT_EQ(wait_rc(p), 0) << "trial " << trial;
    json m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
    ASSERT_EQ(m["natives"].size(), static_cast<std::size_t>(kPatches)) << "trial " << trial;
    ASSERT_EQ(m["modules"].size(), static_cast<std::size_t>(kPatches)) << "trial " << trial;
    std::vector<std::string> ids;
    for (const auto& e : m["natives"]) ids.push_back(e["patch_id"]);
    pids.clear();
    for (const auto& id : ids)
      pids.push_back(spawn_overlay({"revert", "--overlay", (t / "ov").string(), "--patch-id", id}, state));
    for (pid_t p : pids) EXPECT_EQ(wait_rc(p), 0) << "trial " << trial;
    EXPECT_EQ(tree_digest(t / "inst"), before) << "trial " << trial;
    m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
    EXPECT_TRUE(m["natives"].empty());
    EXPECT_TRUE(m["modules"].empty());
  }
}
