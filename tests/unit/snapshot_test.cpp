#include "overlay/snapshot.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/store.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

// Writes a tar with Python's tarfile, the way overlay_setup.py (or an attacker) would.
void python_tar(const fs::path& tar, const std::string& body) {
  std::string script =
      "import tarfile, io, sys\nt = tarfile.open(sys.argv[1], 'w')\n"
      "def add(name, data=b'x', type=tarfile.REGTYPE, link=''):\n"
      "    i = tarfile.TarInfo(name); i.type = type; i.linkname = link; i.size = len(data) if type == tarfile.REGTYPE "
      "else 0\n"
      "    t.addfile(i, io.BytesIO(data) if type == tarfile.REGTYPE else None)\n" +
      body + "\nt.close()\n";
  Cmd c = run({"python3", "-c", script, tar.string()});
  ASSERT_EQ(c.rc, 0) << c.err;
}

void expect_refused(const std::string& body, const std::string& why) {
  TempDir t;
  python_tar(t / "evil.tar", body);
  fs::create_directories(t / "out/dest");
  std::string before = tree_digest(t.path());
  try {
    extract_tar(real_disk(), t / "evil.tar", t / "out/dest", "dest", "");
    ADD_FAILURE() << "extracted: " << body;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t / "escaped"));
  EXPECT_FALSE(fs::exists(t / "out/escaped"));
  EXPECT_FALSE(fs::exists("/tmp/overlay-escaped-by-test"));
  // Nothing outside dest changed.
  fs::remove_all(t / "out/dest");
  fs::create_directories(t / "out/dest");
  EXPECT_EQ(tree_digest(t.path()), before);
}

}  // namespace

TEST(Snapshot, RoundTripKeepsTypesModesLinksEmptyDirs) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.cache);
  std::string sha = snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  EXPECT_EQ(sha, file_sha256(t / "c.tar"));
  // Extracted under another name, as BackupStore does (a temporary sibling swapped in after).
  fs::create_directories(t / "restored/.cache.tmp");
  extract_tar(real_disk(), t / "c.tar", t / "restored/.cache.tmp", "cache", sha);
  EXPECT_EQ(tree_digest(t / "restored/.cache.tmp"), before);
}

// overlay_setup.py's revert: rmtree(dir), then tarfile.extractall(dirname(dir)). The snapshot must
// bring back dir itself (its mode too), not its contents beside it.
TEST(Snapshot, PythonToolRestoresTheDirItself) {
  TempDir t;
  Install in = make_install(t / "inst");
  fs::permissions(in.cache, fs::perms(0751));
  std::string before = tree_digest(in.cache);
  snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  fs::remove_all(in.cache);
  Cmd c = run({"python3", "-c", "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])",
               (t / "c.tar").string(), in.cache.parent_path().string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(tree_digest(in.cache), before);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(in.cache.parent_path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"cache", "lib", "src"}));
}

TEST(Snapshot, MembersAreUnderTheDirsName) {
  TempDir t;
  Install in = make_install(t / "inst");
  snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  Cmd c = run({"python3", "-c",
               "import tarfile,sys; print(sorted({n.split('/')[0] for n in tarfile.open(sys.argv[1]).getnames()}))",
               (t / "c.tar").string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(c.out, "['cache']\n");
}

TEST(Snapshot, ExtractsPythonLayouts) {
  TempDir t;
  Install in = make_install(t / "inst");
  for (std::string arcname : {"'.'", "'cache'"}) {
    fs::remove(t / "py.tar");
    Cmd c = run(
        {"python3", "-c",
         "import tarfile,sys; t=tarfile.open(sys.argv[1],'w'); t.add(sys.argv[2], arcname=" + arcname + "); t.close()",
         (t / "py.tar").string(), in.cache.string()});
    ASSERT_EQ(c.rc, 0) << c.err;
    fs::remove_all(t / "dst");
    fs::create_directories(t / "dst/.cache.overlay-restore-1");  // not named like the cache
    extract_tar(real_disk(), t / "py.tar", t / "dst/.cache.overlay-restore-1", "cache", "");
    EXPECT_EQ(tree_digest(t / "dst/.cache.overlay-restore-1"), tree_digest(in.cache)) << arcname;
  }
}

// A corrupt tar is refused in the single pass that extracts it (hashed as it is read), so the
// extraction target must be private until the proof: the store extracts into a fresh sibling and
// swaps it in only then. The cache in place stays as it was; the half-extraction is litter.
TEST(Snapshot, CorruptTarRefusedAndNeverSwappedIn) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string sha = snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  std::string bytes = read_file(t / "c.tar");
  bytes[bytes.size() / 3] ^= 1;
  write_file(t / "c.tar", bytes);
  fs::create_directories(t / "dst");
  try {
    extract_tar(real_disk(), t / "c.tar", t / "dst", "cache", sha);
    FAIL() << "a corrupt tar was extracted without complaint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt: sha256"), std::string::npos) << e.what();
  }
  fs::create_directories(t / "ov/_native_backup/n1");
  fs::rename(t / "c.tar", t / "ov/_native_backup/n1/cache_0.tar");
  write_file(in.cache / "rebuilt.so", "patched code");
  std::string rebuilt = tree_digest(in.cache);
  BackupStore s(real_disk(), t / "ov");
  EXPECT_THROW(s.restore_dir("_native_backup/n1/cache_0.tar", sha, in.cache), Error);
  EXPECT_EQ(tree_digest(in.cache), rebuilt);
  std::vector<std::string> litter = s.take_litter();
  ASSERT_EQ(litter.size(), 1u);
  EXPECT_NE(litter[0].find("/.cache.overlay-restore-"), std::string::npos) << litter[0];
}

TEST(Snapshot, RefusesAbsoluteNames) { expect_refused("add('/tmp/overlay-escaped-by-test')", "absolute"); }
TEST(Snapshot, RefusesDotDot) { expect_refused("add('../escaped')", "'..'"); }
TEST(Snapshot, RefusesDotDotInside) { expect_refused("add('ok'); add('a/../../escaped')", "'..'"); }
TEST(Snapshot, RefusesWritingThroughSymlink) {
  expect_refused("add('link', type=tarfile.SYMTYPE, link='..')\nadd('link/escaped')", "non-directory");
}
TEST(Snapshot, RefusesHardlinkOut) { expect_refused("add('h', type=tarfile.LNKTYPE, link='../escaped')", "'..'"); }
TEST(Snapshot, RefusesHardlinkToSymlink) {
  expect_refused("add('s', type=tarfile.SYMTYPE, link='/etc/passwd')\nadd('h', type=tarfile.LNKTYPE, link='s')",
                 "hard link");
}
TEST(Snapshot, RefusesDevices) { expect_refused("add('dev', type=tarfile.CHRTYPE)", "special"); }

// Names are bytes (issue 32): the binary runs in the C locale, where libarchive could neither
// write a name with a byte >= 0x80 to a pax header nor read a UTF-8 one back. A UTF-8 name and a
// name that is not UTF-8 survive our round trip, Python's tarfile reads ours back to the same
// bytes, and ours reads Python's.
TEST(Snapshot, NamesWithBytesAbove127BothWays) {
  TempDir t;
  Install in = make_install(t / "inst");
  const std::string utf8 = std::string("caf") + "\xc3\xa9" + ".bin", latin1 = std::string("caf") + '\xe9' + ".bin";
  write_file(in.cache / utf8, "utf-8 name\n");
  write_file(in.cache / latin1, "latin-1 name\n");
  std::string before = tree_digest(in.cache);
  std::string sha = snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  fs::create_directories(t / "ours/.cache.tmp");
  extract_tar(real_disk(), t / "c.tar", t / "ours/.cache.tmp", "cache", sha);
  EXPECT_EQ(tree_digest(t / "ours/.cache.tmp"), before);
  // Python's tarfile (overlay_setup.py's revert) extracts ours to the same bytes.
  fs::create_directories(t / "py");
  Cmd x = run({"python3", "-c", "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])",
               (t / "c.tar").string(), (t / "py").string()});
  ASSERT_EQ(x.rc, 0) << x.err;
  EXPECT_EQ(tree_digest(t / "py/cache"), before);
  // And ours extracts Python's (pax, UTF-8 `path`; hdrcharset=BINARY for the other name).
  Cmd c = run({"python3", "-c",
               "import tarfile,sys; t=tarfile.open(sys.argv[1],'w',format=tarfile.PAX_FORMAT); t.add(sys.argv[2], "
               "arcname='cache'); t.close()",
               (t / "py.tar").string(), in.cache.string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  fs::create_directories(t / "theirs/.cache.tmp");
  extract_tar(real_disk(), t / "py.tar", t / "theirs/.cache.tmp", "cache", "");
  EXPECT_EQ(tree_digest(t / "theirs/.cache.tmp"), before);
}
