#include "overlay/snapshot.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

// Writes a tar with Python's tarfile, the way overlay_setup.py (or an attacker) would.
void python_tar(const fs::path& tar, const std::string& body) {
  std::string script = "import tarfile, io, sys\nt = tarfile.open(sys.argv[1], 'w')\n"
                       "def add(name, data=b'x', type=tarfile.REGTYPE, link=''):\n"
                       "    i = tarfile.TarInfo(name); i.type = type; i.linkname = link; i.size = len(data) if type == tarfile.REGTYPE else 0\n"
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
    extract_tar(real_disk(), t / "evil.tar", t / "out/dest", "");
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
  fs::create_directories(t / "restored/cache");
  extract_tar(real_disk(), t / "c.tar", t / "restored/cache", sha);
  EXPECT_EQ(tree_digest(t / "restored/cache"), before);
}

TEST(Snapshot, ReadableByPythonTarfile) {
  TempDir t;
  Install in = make_install(t / "inst");
  snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  fs::create_directories(t / "py");
  Cmd c = run({"python3", "-c", "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])",
               (t / "c.tar").string(), (t / "py").string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(tree_digest(t / "py"), tree_digest(in.cache));
}

TEST(Snapshot, ExtractsPythonLayouts) {
  TempDir t;
  Install in = make_install(t / "inst");
  for (std::string arcname : {"'.'", "'cache'"}) {
    fs::remove(t / "py.tar");
    Cmd c = run({"python3", "-c", "import tarfile,sys; t=tarfile.open(sys.argv[1],'w'); t.add(sys.argv[2], arcname=" + arcname + "); t.close()",
                 (t / "py.tar").string(), in.cache.string()});
    ASSERT_EQ(c.rc, 0) << c.err;
    fs::remove_all(t / "dst");
    fs::create_directories(t / "dst/cache");
    extract_tar(real_disk(), t / "py.tar", t / "dst/cache", "");
    EXPECT_EQ(tree_digest(t / "dst/cache"), tree_digest(in.cache)) << arcname;
  }
}

TEST(Snapshot, CorruptTarRefusedBeforeWriting) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string sha = snapshot_dir_to_tar(real_disk(), in.cache, t / "c.tar");
  std::string bytes = read_file(t / "c.tar");
  bytes[bytes.size() / 3] ^= 1;
  write_file(t / "c.tar", bytes);
  fs::create_directories(t / "dst");
  EXPECT_THROW(extract_tar(real_disk(), t / "c.tar", t / "dst", sha), Error);
  EXPECT_TRUE(fs::is_empty(t / "dst"));
}

TEST(Snapshot, RefusesAbsoluteNames) { expect_refused("add('/tmp/overlay-escaped-by-test')", "absolute"); }
TEST(Snapshot, RefusesDotDot) { expect_refused("add('../escaped')", "'..'"); }
TEST(Snapshot, RefusesDotDotInside) { expect_refused("add('ok'); add('a/../../escaped')", "'..'"); }
TEST(Snapshot, RefusesWritingThroughSymlink) {
  expect_refused("add('link', type=tarfile.SYMTYPE, link='..')\nadd('link/escaped')", "non-directory");
}
TEST(Snapshot, RefusesHardlinkOut) { expect_refused("add('h', type=tarfile.LNKTYPE, link='../escaped')", "'..'"); }
TEST(Snapshot, RefusesHardlinkToSymlink) {
  expect_refused("add('s', type=tarfile.SYMTYPE, link='/etc/passwd')\nadd('h', type=tarfile.LNKTYPE, link='s')", "hard link");
}
TEST(Snapshot, RefusesDevices) { expect_refused("add('dev', type=tarfile.CHRTYPE)", "special"); }
