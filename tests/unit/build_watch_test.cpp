#include "overlay/build_watch.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

std::vector<std::string> paths(const std::vector<UntrackedOutput>& v) {
  std::vector<std::string> out;
  for (const auto& u : v) out.push_back(u.change + " " + u.path);
  return out;
}

}  // namespace

TEST(BuildWatch, NamesCreatedAndChangedFilesButNotTrackedCachedOrBookkeeping) {
  TempDir t;
  write_file(t / "b/kept.o", "same");
  write_file(t / "b/changed.o", "old");
  write_file(t / "b/tracked.so", "old");
  write_file(t / "b/cache/x", "old");
  write_file(t / "b/sub/deep.o", "old");
  BuildWatch w = BuildWatch::start(real_disk(), {t / "b", t / "b/sub"}, {t / "b/tracked.so"}, {t / "b/cache"});
  EXPECT_EQ(w.off_reason(), "");
  write_file(t / "b/changed.o", "new!");
  write_file(t / "b/tracked.so", "new");
  write_file(t / "b/cache/x", "new");
  write_file(t / "b/new/made.o", "new");
  write_file(t / "b/.ninja_log", "log");
  write_file(t / "b/made.o.d", "deps");
  auto out = w.finish(real_disk());
  EXPECT_EQ(paths(out), (std::vector<std::string>{"changed " + (t / "b/changed.o").string(), "created " + (t / "b/new/made.o").string()}));
  // still_as_built keeps only what nothing rewrote since.
  write_file(t / "b/new/made.o", "regenerated");
  EXPECT_EQ(paths(still_as_built(real_disk(), out)), (std::vector<std::string>{"changed " + (t / "b/changed.o").string()}));
}

TEST(BuildWatch, TooManyFilesTurnsItOffAndSaysWhy) {
  TempDir t;
  for (int i = 0; i < 5; ++i) write_file(t / ("d/f" + std::to_string(i)), "x");
  BuildWatch w = BuildWatch::start(real_disk(), {t / "d"}, {}, {}, 3);
  EXPECT_EQ(w.off_reason(), "more than 3 files under " + (t / "d").string());
  write_file(t / "d/f0", "changed");
  EXPECT_TRUE(w.finish(real_disk()).empty());
}

TEST(BuildWatch, KeepsARevertedEntrysOutputsAtTheTopLevel) {
  TempDir t;
  write_file(t / "o.o", "built");
  FileInfo fi = real_disk().info(t / "o.o", Follow::no);
  NativeEntry e;
  e.id = "n1";
  e.build_cmds = {{"make"}};
  e.untracked = {{(t / "o.o").string(), "changed", stamp_of(fi), "", {}, ""}};
  Manifest m;
  keep_untracked_of_reverted(real_disk(), m, e);
  ASSERT_EQ(m.untracked.size(), 1u);
  EXPECT_EQ(m.untracked[0].entry, "n1");
  Manifest back = parse_manifest(serialize_manifest(m));
  ASSERT_EQ(back.untracked.size(), 1u);
  EXPECT_EQ(back.untracked[0].build_cmds, (std::vector<std::vector<std::string>>{{"make"}}));
  EXPECT_EQ(back.untracked[0].stamp, m.untracked[0].stamp);
  EXPECT_THROW(parse_manifest(R"({"untracked_outputs": [{"path": "rel", "change": "created", "size": 1, "ino": 1, "mtime_ns": 1}]})"),
               ManifestError);
  EXPECT_THROW(parse_manifest(R"({"untracked_outputs": [{"path": "/a", "change": "eaten", "size": 1, "ino": 1, "mtime_ns": 1}]})"),
               ManifestError);
}

// A build graph real Ninja answers for: a relink against a changed shared library holds none of
// the patched code; a link of a changed object, or an edge whose changed input Ninja does not
// list (order-only, or no edge at all), may.
TEST(BuildWatch, MarksOnlyOutputsRelinkedAgainstChangedSharedLibraries) {
  TempDir t;
  write_file(t / "b/build.ninja",
             "rule link\n  command = touch $out\n"
             "build libk.so: link k.o\n"
             "build app: link main.o | libk.so\n"
             "build libk2.so.1: link k2.o libk.so\n"
             "build app2: link main.o libk2.so.1\n"
             "build static_app: link main.o k.o\n"
             "build ordered: link main.o || libk.so\n");
  std::vector<UntrackedOutput> outs;
  for (const char* n : {"app", "libk2.so.1", "app2", "static_app", "ordered", "stray.o"})
    outs.push_back({(t / "b" / n).string(), "changed", {}, "", {}, ""});
  mark_relinked(outs, {t / "b/libk.so", t / "b/k.o"});
  std::vector<std::string> got;
  for (const auto& u : outs) got.push_back(fs::path(u.path).filename().string() + ":" + fs::path(u.relinked_against).filename().string());
  EXPECT_EQ(got, (std::vector<std::string>{"app:libk.so", "libk2.so.1:libk.so", "app2:libk2.so.1", "static_app:", "ordered:", "stray.o:"}));
  // Recorded per entry; dropped, not kept, when its entry is reverted.
  NativeEntry e;
  e.id = "n1";
  e.untracked = outs;
  Manifest m;
  m.natives.push_back(e);
  Manifest back = parse_manifest(serialize_manifest(m));
  EXPECT_EQ(back.natives.at(0).untracked.at(0).relinked_against, (t / "b/libk.so").string());
  EXPECT_EQ(back.natives.at(0).untracked.at(3).relinked_against, "");
}
