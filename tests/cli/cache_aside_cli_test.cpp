// Issue 23: a cache dir the overlay's filesystem cannot take by rename is renamed aside on its own
// filesystem (a hidden sibling), O(1) at any file count, through the real binary: auto picks it
// across filesystems, tar where the cache's parent cannot be written; a replaced or planted aside
// copy is refused; the rebuilt cache revert replaces is litter the record names until deleted.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct CacheAside : ::testing::Test {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  fs::path ov = t / "ov";

  CacheAside() { write_file(t / "patched.cpp", "int kernel() { return 7; }\n"); }

  // add-native of the kernel with the cache; the build fills the cache again, as a JIT does.
  Cmd add(const fs::path& overlay, const std::string& snapshot = "auto") {
    return run_overlay({"add-native", "--overlay", overlay.string(), "--target", in.source.string(), "--patched-file",
                        (t / "patched.cpp").string(), "--invalidate-cache", in.cache.string(), "--cache-snapshot",
                        snapshot, "--build-cwd", in.root.string(), "--build-cmd",
                        "sh -c 'mkdir cache && echo rebuilt > cache/new.so'"});
  }
  json cache_item(const fs::path& overlay) {
    return json::parse(read_file(overlay / "_overlay_manifest.json"))["natives"][0]["caches"].back();
  }
  // The hidden siblings of the cache dir now in the install.
  std::vector<std::string> siblings() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(in.root))
      if (e.path().filename().string().rfind(".cache.", 0) == 0) out.push_back(e.path().filename().string());
    return out;
  }
};

ino_t ino(const fs::path& p) { return inode_of(p); }

}  // namespace

TEST_F(CacheAside, AcrossFilesystemsAutoRenamesTheCacheAsideAndBackInPlace) {
  fs::create_directories(t / "shm");
  auto mnt = ScopedMount::tmpfs(t / "shm");
  if (!mnt->ok()) GTEST_SKIP() << mnt->why();
  fs::path shm_ov = t / "shm/ov";
  ino_t cache_ino = ino(in.cache);
  Cmd a = add(shm_ov);
  ASSERT_EQ(a.rc, 0) << a.err;
  json c = cache_item(shm_ov);
  ASSERT_TRUE(c.contains("aside")) << c;
  EXPECT_TRUE(c["backup_tar"].is_null()) << c;
  fs::path aside = c["aside"]["path"].get<std::string>();
  EXPECT_EQ(aside.parent_path(), in.root);
  EXPECT_EQ(aside.filename().string().rfind(".cache.overlay-aside-", 0), 0u) << aside;
  EXPECT_EQ(ino(aside), cache_ino);  // renamed, not copied: the very directory
  EXPECT_EQ(c["aside"]["ino"].get<std::uint64_t>(), static_cast<std::uint64_t>(cache_ino));
  EXPECT_EQ(read_file(in.cache / "new.so"), "rebuilt\n");
  // overlay_setup.py cannot put such a cache back: the entry's guard stops it first.
  EXPECT_TRUE(json::parse(read_file(shm_ov / "_overlay_manifest.json"))["natives"][0]["caches"][0].value(
      "python_tool_guard", false));
  Cmd st = run_overlay({"status", "--overlay", shm_ov.string()});
  EXPECT_NE(
      st.out.find("cache     rebuilt      " + in.cache.string() + "  (original kept aside at " + aside.string() + ")"),
      std::string::npos)
      << st.out;
  Cmd r = run_overlay({"--json", "revert", "--overlay", shm_ov.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(ino(in.cache), cache_ino);
  EXPECT_FALSE(fs::exists(aside));
  // The rebuilt cache left as litter, named on the record until its deleter is done.
  json m = json::parse(read_file(shm_ov / "_overlay_manifest.json"));
  ASSERT_EQ(m["litter"].size(), 1u) << m;
  EXPECT_EQ(fs::path(m["litter"][0].get<std::string>()).parent_path(), in.root);
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_TRUE(siblings().empty());
}

// A cache dir that is a mount point of its own (a separate volume) cannot be renamed at all:
// auto keeps it as a tar, cleared and restored in place; asking for aside is refused up front.
TEST_F(CacheAside, AMountPointCacheIsATarRestoredInPlaceAndAsideIsRefused) {
  std::string files = tree_digest(in.cache);
  fs::rename(in.cache, t / "cache-content");
  fs::create_directories(in.cache);
  auto mnt = ScopedMount::tmpfs(in.cache);
  if (!mnt->ok()) GTEST_SKIP() << mnt->why();
  ASSERT_EQ(run({"cp", "-a", (t / "cache-content").string() + "/.", in.cache.string()}).rc, 0);
  ASSERT_EQ(run({"chmod", "755", in.cache.string()}).rc, 0);
  ASSERT_EQ(run({"touch", "-r", (t / "cache-content").string(), in.cache.string()}).rc, 0);
  std::string mounted = tree_digest(in.root);
  Cmd bad = add(ov, "aside");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(bad.err,
            "add-native: --cache-snapshot aside: cannot rename " + in.cache.string() + ": it is a mount point\n");
  EXPECT_FALSE(fs::exists(ov / "_overlay_manifest.json"));
  EXPECT_EQ(tree_digest(in.root), mounted);
  Cmd a = run_overlay({"add-native", "--overlay", ov.string(), "--target", in.source.string(), "--patched-file",
                       (t / "patched.cpp").string(), "--invalidate-cache", in.cache.string(), "--build-cwd",
                       in.root.string(), "--build-cmd",
                       "sh -c 'test -z \"$(ls -A cache)\" && echo rebuilt > cache/new.so'"});
  ASSERT_EQ(a.rc, 0) << a.err;  // the build found the cache emptied in place
  json c = cache_item(ov);
  EXPECT_TRUE(c["backup_tar"].is_string()) << c;
  EXPECT_FALSE(c.contains("aside")) << c;
  Cmd r = run_overlay({"revert", "--overlay", ov.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), mounted);
  EXPECT_EQ(tree_digest(in.cache), files);
}

// A parent this process cannot write (here a read-only mount) cannot take an aside copy: asking
// for one is refused before anything is touched.
TEST_F(CacheAside, AsideIntoAReadOnlyParentIsRefusedUpFront) {
  auto ro = ScopedMount::read_only(in.root);
  if (!ro->ok()) GTEST_SKIP() << ro->why();
  write_file(t / "k.cpp", "int k() { return 4; }\n");
  Cmd bad =
      run_overlay({"add-native", "--overlay", ov.string(), "--target", (t / "k.cpp").string(), "--patched-file",
                   (t / "patched.cpp").string(), "--invalidate-cache", in.cache.string(), "--cache-snapshot", "aside"});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(bad.err, "add-native: --cache-snapshot aside: cannot rename " + in.cache.string() + ": its parent " +
                         in.root.string() + " is not writable\n");
  EXPECT_FALSE(fs::exists(ov / "_overlay_manifest.json"));
  EXPECT_EQ(read_file(t / "k.cpp"), "int k() { return 4; }\n");
}

TEST_F(CacheAside, AReplacedAsideCopyIsRefusedAndTheEntryKept) {
  ino_t cache_ino = ino(in.cache);
  ASSERT_EQ(add(ov, "aside").rc, 0);
  fs::path aside = cache_item(ov)["aside"]["path"].get<std::string>();
  // Someone who can write the install's directory swaps the copy for a tree of their own.
  fs::rename(aside, t / "kept-original");
  fs::create_directories(aside);
  write_file(aside / "evil.so", "evil\n");
  Cmd st = run_overlay({"status", "--overlay", ov.string()});
  EXPECT_NE(st.out.find("aside copy replaced since add-native: revert refuses it"), std::string::npos) << st.out;
  Cmd r = run_overlay({"revert", "--overlay", ov.string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(in.cache.string() + ": aside copy " + aside.string() + " was replaced since add-native"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("refusing to restore it"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(in.cache / "new.so"), "rebuilt\n");  // nothing of the planted tree went in
  EXPECT_EQ(read_file(aside / "evil.so"), "evil\n");
  EXPECT_EQ(json::parse(read_file(ov / "_overlay_manifest.json"))["natives"].size(), 1u);
  // Its symlink to the real copy is no better: not the recorded directory either.
  fs::remove_all(aside);
  fs::create_directory_symlink(t / "kept-original", aside);
  EXPECT_EQ(run_overlay({"revert", "--overlay", ov.string()}).rc, 1);
  EXPECT_EQ(read_file(in.cache / "new.so"), "rebuilt\n");
  // The real copy back where it was recorded: revert finishes.
  fs::remove(aside);
  fs::rename(t / "kept-original", aside);
  Cmd ok = run_overlay({"revert", "--overlay", ov.string()});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(ino(in.cache), cache_ino);
  EXPECT_EQ(tree_digest(in.root), before);
}

// The rebuilt cache a revert swaps out is out of the install when revert returns (issue 50): in
// the overlay's _trash on one filesystem, deleted there by a detached deleter. One that dies
// (forced here by an immutable file: chattr +i, even root cannot unlink it, made mutable again
// afterwards) leaves it in _trash, which the next gc-stale deletes; the install is as it was.
TEST_F(CacheAside, LitterOfAKilledDeleterIsSweptByTheNextGcStale) {
  ASSERT_EQ(add(ov, "aside").rc, 0);
  if (run({"chattr", "+i", (in.cache / "new.so").string()}).rc != 0) GTEST_SKIP() << "chattr +i not supported here";
  Cmd r = run_overlay({"revert", "--overlay", ov.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  json m = json::parse(read_file(ov / "_overlay_manifest.json"));
  ASSERT_EQ(m["litter"].size(), 1u) << m;
  EXPECT_FALSE(fs::exists(m["litter"][0].get<std::string>()))
      << "revert returned with the rebuilt cache in the install";
  EXPECT_EQ(tree_digest(in.root), before);
  // The deleter gives up on the immutable file: it is done once nothing else is left in _trash.
  auto files_in_trash = [&] {
    std::uintmax_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(ov / "_trash", ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      n += it->is_directory(ec) ? 0 : 1;
    return n;
  };
  ASSERT_TRUE(wait_while_progressing([&] { return files_in_trash() == 1; }, files_in_trash));
  fs::path kept;
  for (const auto& e : fs::recursive_directory_iterator(ov / "_trash"))
    if (e.path().filename() == "new.so") kept = e.path();
  ASSERT_FALSE(kept.empty()) << "the immutable file is not in the overlay's _trash";
  ASSERT_EQ(run({"chattr", "-i", kept.string()}).rc, 0);
  Cmd gc = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_EQ(gc.rc, 0) << gc.err;
  EXPECT_TRUE(wait_until_gone(kept));
  // The record forgets the litter (the next run that rewrites the manifest).
  run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_FALSE(json::parse(read_file(ov / "_overlay_manifest.json")).contains("litter"));
  EXPECT_EQ(tree_digest(in.root), before);
}
