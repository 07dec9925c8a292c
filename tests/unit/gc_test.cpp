#include "overlay/gc.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "overlay/native.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {
void apply(const fs::path& overlay, const fs::path& target, std::optional<pid_t> owner = std::nullopt) {
  write_file(overlay.parent_path() / "p.cpp", "patched\n");
  AddNativeRequest r;
  r.overlay = overlay;
  r.targets = {target};
  r.patched_files = {overlay.parent_path() / "p.cpp"};
  r.owner_pid = owner;
  apply_native(real_disk(), plan_add_native(real_disk(), r));
}
}  // namespace

TEST(GcStale, RevertsStaleSparesLiveAndUntrusted) {
  TempDir t;
  for (const char* n : {"a", "b", "c", "d"}) write_file(t / "inst" / n, std::string("orig ") + n + "\n");
  std::string before = tree_digest(t / "inst");
  apply(t / "runs/1/ov", t / "inst/a");
  apply(t / "runs/2/deeper/ov", t / "inst/b");
  apply(t / "runs/3/ov", t / "inst/c", ::getpid());  // a live run
  apply(t / "runs/4/ov", t / "inst/d");
  ::chmod((t / "runs/4/ov/_overlay_manifest.json").c_str(), 0666);  // untrusted
  write_file(t / "runs/5/ov/_overlay_manifest.json", R"({"modules": [], "natives": []})");

  GcReport dry = gc_stale(real_disk(), t / "runs", {.dry_run = true, .min_age_s = std::nullopt, .lock_timeout = 5});
  EXPECT_EQ(dry.count(GcOutcome::would_revert), 2u);
  EXPECT_NE(tree_digest(t / "inst"), before);

  GcReport r = gc_stale(real_disk(), t / "runs", {.dry_run = false, .min_age_s = std::nullopt, .lock_timeout = 5});
  EXPECT_EQ(r.count(GcOutcome::reverted), 2u);
  EXPECT_EQ(r.count(GcOutcome::skipped), 2u);
  EXPECT_EQ(read_file(t / "inst/a"), "orig a\n");
  EXPECT_EQ(read_file(t / "inst/b"), "orig b\n");
  EXPECT_EQ(read_file(t / "inst/c"), "patched\n");
  EXPECT_EQ(read_file(t / "inst/d"), "patched\n");
  for (const auto& i : r.items)
    if (i.overlay == t / "runs/4/ov") {
      EXPECT_NE(i.reason.find("writable"), std::string::npos);
    }
}

TEST(GcStale, MinAgeSkipsRecent) {
  TempDir t;
  write_file(t / "inst/a", "orig\n");
  apply(t / "runs/ov", t / "inst/a");
  GcReport r = gc_stale(real_disk(), t / "runs", {.dry_run = false, .min_age_s = 3600.0, .lock_timeout = 5});
  EXPECT_EQ(r.count(GcOutcome::skipped), 1u);
  EXPECT_EQ(read_file(t / "inst/a"), "patched\n");
}

// A directory above an overlay that others may write (so could swap for another) leaves that
// overlay alone, named; a sticky one, where others cannot rename what is ours, does not.
TEST(GcStale, AnOverlayBelowADirectoryOthersCanWriteIsSkipped) {
  TempDir t;
  write_file(t / "inst/a", "orig\n");
  apply(t / "runs/open/ov", t / "inst/a");
  fs::permissions(t / "runs/open", fs::perms(0775));
  GcReport r = gc_stale(real_disk(), t / "runs", {.dry_run = false, .min_age_s = std::nullopt, .lock_timeout = 5});
  ASSERT_EQ(r.items.size(), 1u);
  EXPECT_EQ(r.items[0].outcome, GcOutcome::skipped);
  EXPECT_EQ(r.items[0].reason, "directory " + (t / "runs/open").string() +
                                   " above it is group- or world-writable (another user could swap it)");
  EXPECT_EQ(read_file(t / "inst/a"), "patched\n");
  fs::permissions(t / "runs/open", fs::perms(01777));
  r = gc_stale(real_disk(), t / "runs", {.dry_run = false, .min_age_s = std::nullopt, .lock_timeout = 5});
  EXPECT_EQ(r.count(GcOutcome::reverted), 1u);
  EXPECT_EQ(read_file(t / "inst/a"), "orig\n");
}
