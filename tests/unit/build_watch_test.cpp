#include "overlay/build_watch.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/object_files.hpp"

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
  EXPECT_EQ(paths(out), (std::vector<std::string>{"changed " + (t / "b/changed.o").string(),
                                                  "created " + (t / "b/new/made.o").string()}));
  // still_as_built keeps only what nothing rewrote since.
  write_file(t / "b/new/made.o", "regenerated");
  EXPECT_EQ(paths(still_as_built(real_disk(), out)),
            (std::vector<std::string>{"changed " + (t / "b/changed.o").string()}));
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
  EXPECT_THROW(
      parse_manifest(
          R"({"untracked_outputs": [{"path": "rel", "change": "created", "size": 1, "ino": 1, "mtime_ns": 1}]})"),
      ManifestError);
  EXPECT_THROW(parse_manifest(
                   R"({"untracked_outputs": [{"path": "/a", "change": "eaten", "size": 1, "ino": 1, "mtime_ns": 1}]})"),
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
  judge_untracked(real_disk(), outs, {t / "b/libk.so", t / "b/k.o"}, {});
  std::vector<std::string> got;
  for (const auto& u : outs) got.push_back(fs::path(u.path).filename().string() + ":" + u.clear_reason);
  std::string b = (t / "b").string();
  EXPECT_EQ(got,
            (std::vector<std::string>{
                "app:relinked against " + b + "/libk.so only", "libk2.so.1:relinked against " + b + "/libk.so only",
                "app2:relinked against " + b + "/libk2.so.1 only", "static_app:", "ordered:", "stray.o:"}));
  // Recorded per entry; dropped, not kept, when its entry is reverted.
  NativeEntry e;
  e.id = "n1";
  e.untracked = outs;
  Manifest m;
  m.natives.push_back(e);
  Manifest back = parse_manifest(serialize_manifest(m));
  EXPECT_EQ(back.natives.at(0).untracked.at(0).clear_reason, "relinked against " + b + "/libk.so only");
  EXPECT_EQ(back.natives.at(0).untracked.at(3).clear_reason, "");
}

// By their own bytes, with real cc and ar: an object whose symbol table names another source than
// the patched one is clear, the patched source's is not, and none is when a header was patched
// (it may be in any object); a thin archive holds paths, not code.
TEST(BuildWatch, ObjectsOfOtherSourcesAndThinArchivesHoldNoPatchedCode) {
  TempDir t;
  write_file(t / "a.c", "int a(void) { return 1; }\n");
  write_file(t / "b.c", "int b(void) { return 2; }\n");
  ASSERT_EQ(run({"cc", "-c", "a.c", "b.c"}, t.path()).rc, 0);
  ASSERT_EQ(run({"ar", "csrT", "libthin.a", "a.o"}, t.path()).rc, 0);
  ASSERT_EQ(run({"ar", "csr", "libfat.a", "a.o"}, t.path()).rc, 0);
  auto judge = [&](const std::vector<fs::path>& patched) {
    std::vector<UntrackedOutput> outs;
    for (const char* n : {"a.o", "b.o", "libthin.a", "libfat.a"})
      outs.push_back({(t / n).string(), "changed", {}, "", {}, ""});
    judge_untracked(real_disk(), outs, patched, patched);
    std::vector<std::string> got;
    for (const auto& u : outs) got.push_back(u.clear_reason);
    return got;
  };
  EXPECT_EQ(judge({t / "a.c"}),
            (std::vector<std::string>{"", "compiled from b.c (its symbol table), not from a patched source",
                                      "a thin archive: its members' paths, not their code", ""}));
  EXPECT_EQ(judge({t / "a.c", t / "k.h"}),
            (std::vector<std::string>{"", "", "a thin archive: its members' paths, not their code", ""}));
  EXPECT_EQ(object_source_files(real_disk(), t / "b.o"), (std::vector<std::string>{"b.c"}));
  EXPECT_EQ(object_source_files(real_disk(), t / "b.c"), std::nullopt);
}

// What the tool itself put beside a watched file (a cache renamed aside, a temp, trash) is not
// walked: an aside copy of a 20,000-file cache once cost the watch 40,000 stat calls, and
// counted against its file limit, turning the watch off.
TEST(BuildWatch, SkipsTheToolsOwnSiblingsNotTheBuildsFiles) {
  TempDir t;
  for (int i = 0; i < 50; ++i) write_file(t / "b/.cache.overlay-aside-n1-0a1b2c3d" / ("f" + std::to_string(i)), "x");
  write_file(t / "b/.lib.so.overlay-new-0a1b2c", "temp");
  write_file(t / "b/k.cu", "src");
  BuildWatch w = BuildWatch::start(real_disk(), {t / "b"}, {}, {}, 10);
  EXPECT_EQ(w.off_reason(), "");
  write_file(t / "b/.cache.overlay-aside-n1-0a1b2c3d/late", "x");
  write_file(t / "b/.lib.so.overlay-trash-99aa", "trash");
  write_file(t / "b/.hidden.o", "a build's own hidden output");
  EXPECT_EQ(paths(w.finish(real_disk())), (std::vector<std::string>{"created " + (t / "b/.hidden.o").string()}));
  EXPECT_TRUE(is_own_sibling_name(".x.overlay-restore-ab"));
  EXPECT_FALSE(is_own_sibling_name(".x.overlay-restore-"));
  EXPECT_FALSE(is_own_sibling_name("x.overlay-trash-ab"));
}
