// The verdict's rules over a process tree, for overlays with native entries, Python entries or
// both (the processes' facts are given; the CLI tests read them from live processes).
#include "overlay/engagement.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

// A server (pid 10) with one worker (pid 11).
ProcessScan tree() {
  ProcessScan s;
  s.processes = {{10, 1, 100, 'S', "server", {}}, {11, 10, 200, 'S', "worker", {}}};
  return s;
}

ArtifactUse maps(pid_t pid, MapState st, bool reverted = false) {
  return {pid, 0, "", "/opt/x/_C.so", "n1", st, reverted};
}

PythonUse ran(pid_t pid, std::vector<std::string> applied, std::vector<std::string> failed = {},
              std::vector<std::string> pending = {}, std::vector<std::string> displaced = {}) {
  return {.pid = pid,
          .start_ticks = 0,
          .cmdline = "",
          .applied = std::move(applied),
          .failed = std::move(failed),
          .pending = std::move(pending),
          .displaced = std::move(displaced),
          .overlay = std::nullopt};
}

const std::string kRebind = "rebind:m:f->impl.g";

}  // namespace

TEST(EngagementVerdict, NativeOnlyNeedsEveryMappingPatched) {
  EngagementScope native{true, {}, {}, {}};
  EngagementReport r;
  r.uses = {maps(11, MapState::patched)};
  EXPECT_TRUE(engagement_verdict(r, tree(), {10}, native).engaged);
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, native).why, "process 11 (a descendant) maps the patched /opt/x/_C.so");
  r.uses.push_back(maps(10, MapState::stale));
  Verdict v = engagement_verdict(r, tree(), {10}, native);
  EXPECT_FALSE(v.engaged);
  EXPECT_EQ(v.why, "process 10 maps the stale build of /opt/x/_C.so (started before it was rebuilt: restart it)");
  r.uses = {maps(10, MapState::patched, true)};
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, native).why, "process 10 maps /opt/x/_C.so that revert replaced");
  r.uses.clear();
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, native).why,
            "process 10 and its 1 descendant(s) map none of the tracked artifacts");
  EXPECT_EQ(engagement_verdict(r, tree(), {99}, native).why, "process 99 is gone");
  // A GPU code object is never mapped: the verdict says why it cannot be seen.
  EngagementScope code{true, {}, {"/opt/x/kernels/attn.hsaco"}, {}};
  EXPECT_NE(engagement_verdict(r, tree(), {10}, code)
                .why.find("(/opt/x/kernels/attn.hsaco is a GPU code object: hipModuleLoad"),
            std::string::npos);
}

TEST(EngagementVerdict, PythonOnlyNeedsEveryEntryAppliedInTheTree) {
  EngagementScope python{false, {kRebind, "module:m.sub"}, {}, {}};
  EngagementReport r;
  Verdict none = engagement_verdict(r, tree(), {10}, python);
  EXPECT_FALSE(none.engaged);
  EXPECT_NE(none.why.find("did not run the overlay's Python entries"), std::string::npos) << none.why;
  r.python = {ran(10, {"module:m.sub"}, {}, {kRebind})};
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, python).why,
            "Python entry " + kRebind + " has not applied in process 10 (its module is not imported yet)");
  r.python.push_back(ran(11, {kRebind}));
  Verdict both = engagement_verdict(r, tree(), {10}, python);
  EXPECT_TRUE(both.engaged) << both.why;
  EXPECT_EQ(both.why, "process 10 applied 1 Python entry (the rest in other processes of its tree)");
  r.python[1].failed = {"capture:m:h"};
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, python).why,
            "process 11 (a descendant): capture:m:h FAILED (its [overlay] lines on stderr say why)");
  // A record from before the entry was added names it nowhere.
  r.python = {ran(10, {"module:m.sub"})};
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, python).why,
            "Python entry " + kRebind + " has not applied in process 10 (added after it started: restart it)");
  // The hint (the worker modules, where the overlay lacks them) follows a Python verdict that is
  // not engaged, never one that is.
  python.python_hint = "; HINT";
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, python).why,
            "Python entry " + kRebind + " has not applied in process 10 (added after it started: restart it); HINT");
  r.python = {ran(10, {"module:m.sub"}, {}, {kRebind}), ran(11, {kRebind})};
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, python).why.find("HINT"), std::string::npos);
}

TEST(EngagementVerdict, BothPartsMustBeEngagedAndNothingStale) {
  EngagementScope both{true, {kRebind}, {}, {}};
  EngagementReport r;
  r.python = {ran(10, {kRebind})};
  EXPECT_FALSE(engagement_verdict(r, tree(), {10}, both).engaged);  // the library is not mapped
  r.uses = {maps(11, MapState::patched)};
  Verdict v = engagement_verdict(r, tree(), {10}, both);
  EXPECT_TRUE(v.engaged) << v.why;
  EXPECT_EQ(v.why, "process 11 (a descendant) maps the patched /opt/x/_C.so; process 10 applied 1 Python entry");
  // A Python-only overlay whose process still maps a stale tracked artifact of an old entry.
  EngagementScope python{false, {kRebind}, {}, {}};
  r.uses = {maps(11, MapState::stale)};
  EXPECT_FALSE(engagement_verdict(r, tree(), {10}, python).engaged);
  EngagementScope nothing{false, {}, {}, {}};
  r.uses.clear();
  EXPECT_EQ(engagement_verdict(r, tree(), {10}, nothing).why,
            "the overlay has no entry that a process could run (none added, or all reverted)");
}

TEST(EngagementVerdict, LiveRecordsAsSitecustomizeWritesThem) {
  auto u = parse_live_record(
      R"({"pid": 42, "start_ticks": 7, "applied": ["module:a"], "failed": [], "pending": ["capture:b:c"]})");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->pid, 42);
  EXPECT_EQ(u->start_ticks, 7u);
  EXPECT_EQ(u->applied, std::vector<std::string>{"module:a"});
  EXPECT_EQ(u->pending, std::vector<std::string>{"capture:b:c"});
  EXPECT_FALSE(parse_live_record("{\"pid\": -1, \"start_ticks\": 7}").has_value());
  EXPECT_FALSE(parse_live_record("{\"pid\": 42}").has_value());
  EXPECT_FALSE(parse_live_record("not json").has_value());
}

// Issue 74: a record names the overlay it was made under by its directory's device and inode; one
// naming none, or not as two unsigned numbers, names no overlay (and counts for none).
TEST(EngagementVerdict, ALiveRecordNamesItsOverlay) {
  auto u = parse_live_record(R"({"pid": 42, "start_ticks": 7, "overlay": [2049, 131], "applied": []})");
  ASSERT_TRUE(u.has_value());
  ASSERT_TRUE(u->overlay.has_value());
  EXPECT_EQ(*u->overlay, (OverlayIdentity{2049, 131}));
  for (const char* bad : {R"({"pid": 42, "start_ticks": 7})", R"({"pid": 42, "start_ticks": 7, "overlay": [1]})",
                          R"({"pid": 42, "start_ticks": 7, "overlay": [-1, 3]})",
                          R"({"pid": 42, "start_ticks": 7, "overlay": "/tmp/ov"})"}) {
    auto v = parse_live_record(bad);
    ASSERT_TRUE(v.has_value()) << bad;
    EXPECT_FALSE(v->overlay.has_value()) << bad;
  }
  TempDir t;
  auto id = overlay_identity(real_disk(), t.path());
  ASSERT_TRUE(id.has_value());
  struct stat st {};
  ASSERT_EQ(::stat(t.path().c_str(), &st), 0);
  EXPECT_EQ(*id, (OverlayIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)}));
  EXPECT_FALSE(overlay_identity(real_disk(), t / "absent").has_value());
}

// The record's first line is the whole record at start; each line after it says what applied or
// failed since (issue 51: written once per key, not rewritten per module). A line still being
// appended (no newline yet) or torn is left out; pending loses what applied.
TEST(EngagementVerdict, ALiveRecordsAppendedLinesAddToItsFirst) {
  auto u = parse_live_record(
      "{\"pid\": 42, \"start_ticks\": 7, \"applied\": [\"module:a\"], \"failed\": [], \"pending\": [\"rebind:b:f\", "
      "\"rebind:c:f\", \"rebind:d:f\"]}\n"
      "{\"applied\": [\"rebind:b:f\"], \"failed\": []}\n"
      "{\"applied\": [], \"fai\n"
      "{\"applied\": [], \"failed\": [\"rebind:c:f\"]}\n"
      "{\"applied\": [\"rebind:d:f\"], \"failed\": []}");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->applied, (std::vector<std::string>{"module:a", "rebind:b:f"}));
  EXPECT_EQ(u->failed, std::vector<std::string>{"rebind:c:f"});
  EXPECT_EQ(u->pending, std::vector<std::string>{"rebind:d:f"});
}

// Issue 62: a rebind another overlay's rebind replaced in the process (the runtime appends it as
// `displaced`) is not engaged, though it applied.
TEST(EngagementVerdict, ARebindReplacedByAnotherOverlaysIsNotEngaged) {
  auto u = parse_live_record(
      "{\"pid\": 42, \"start_ticks\": 7, \"applied\": [], \"failed\": [], \"pending\": [\"rebind:m:f->impl.g\"]}\n"
      "{\"applied\": [\"rebind:m:f->impl.g\"], \"failed\": []}\n"
      "{\"applied\": [], \"failed\": [], \"displaced\": [\"rebind:m:f->impl.g\"]}\n");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->displaced, std::vector<std::string>{kRebind});
  EngagementScope python{false, {kRebind}, {}, {}};
  EngagementReport r;
  r.python = {ran(10, {kRebind})};
  EXPECT_TRUE(engagement_verdict(r, tree(), {10}, python).engaged);
  r.python = {ran(10, {kRebind}, {}, {}, {kRebind})};
  Verdict v = engagement_verdict(r, tree(), {10}, python);
  EXPECT_FALSE(v.engaged);
  EXPECT_EQ(v.why.rfind("process 10: " + kRebind + " was replaced by another overlay's entry on the same target", 0),
            0u)
      << v.why;
}
