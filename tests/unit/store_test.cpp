#include "overlay/store.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/manifest.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(BackupStore, EntryIdsNeverCollide) {
  TempDir t;
  BackupStore s(real_disk(), t.path());
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.insert(s.new_entry());
  EXPECT_EQ(ids.size(), 200u);
}

TEST(BackupStore, SaveAndRestoreFile) {
  TempDir t;
  write_file(t / "inst/f", "original", 0750);
  BackupStore s(real_disk(), t / "ov");
  fs::create_directories(t / "ov");
  std::string id = s.new_entry();
  SavedFile saved = s.save_file(id, "src_0", t / "inst/f");
  EXPECT_EQ(saved.mode, 0750u);
  EXPECT_EQ(read_file(t / "ov" / saved.backup), "original");
  write_file(t / "inst/f", "patched", 0644);
  EXPECT_TRUE(s.restore_file(saved, t / "inst/f"));
  EXPECT_EQ(read_file(t / "inst/f"), "original");
  EXPECT_EQ(fs::status(t / "inst/f").permissions(), static_cast<fs::perms>(0750));
  EXPECT_FALSE(s.restore_file(saved, t / "inst/f"));  // already original
  s.forget(saved.backup);
  EXPECT_FALSE(fs::exists(t / "ov" / saved.backup));
  EXPECT_FALSE(fs::exists(t / "ov/_native_backup" / id));
}

TEST(BackupStore, TamperedBackupRefusedAndTargetUntouched) {
  TempDir t;
  write_file(t / "inst/f", "original");
  fs::create_directories(t / "ov");
  BackupStore s(real_disk(), t / "ov");
  SavedFile saved = s.save_file(s.new_entry(), "src_0", t / "inst/f");
  write_file(t / "ov" / saved.backup, "tampered");
  write_file(t / "inst/f", "patched");
  try {
    FileBackup without_mode = saved;  // as overlay_setup.py records it: the backup's mode is used
    without_mode.mode.reset();
    s.restore_file(without_mode, t / "inst/f");
    FAIL() << "restored from a tampered backup";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos);
  }
  EXPECT_EQ(read_file(t / "inst/f"), "patched");
  EXPECT_EQ(std::distance(fs::directory_iterator(t / "inst"), fs::directory_iterator()), 1);
}

TEST(BackupStore, ResolveRefusesEscapes) {
  TempDir t;
  fs::create_directories(t / "ov/_native_backup");
  fs::create_directories(t / "elsewhere");
  fs::create_symlink(t / "elsewhere", t / "ov/_native_backup/out");
  BackupStore s(real_disk(), t / "ov");
  EXPECT_THROW(s.resolve("../x"), Error);
  EXPECT_THROW(s.resolve("/etc/passwd"), Error);
  EXPECT_THROW(s.resolve("_native_backup/out/file"), Error);
  EXPECT_EQ(s.resolve("_native_backup/ok"), t / "ov/_native_backup/ok");
}

TEST(BackupStore, RestoreDirReplacesWholeTree) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.cache);
  fs::create_directories(t / "ov");
  BackupStore s(real_disk(), t / "ov");
  SavedFile tar = s.save_dir_tar(s.new_entry(), "cache_0", in.cache);
  fs::remove_all(in.cache);
  write_file(in.cache / "new-junk", "junk");
  s.restore_dir(tar.backup, tar.sha256, in.cache);
  EXPECT_EQ(tree_digest(in.cache), before);
  // The replaced tree is litter, named for the record, then deleted in the background.
  std::vector<std::string> litter = s.take_litter();
  ASSERT_EQ(litter.size(), 1u);
  EXPECT_TRUE(is_litter_path(litter[0])) << litter[0];
  EXPECT_EQ(read_file(fs::path(litter[0]) / "new-junk"), "junk");
  s.purge(litter);
  EXPECT_TRUE(wait_until_gone(litter[0]));
  for (const auto& e : fs::directory_iterator(in.root))
    EXPECT_EQ(e.path().filename().string().find(".cache.overlay-"), std::string::npos) << e.path();
}

AsideDir aside_of(const fs::path& dir, const std::string& id) {
  struct stat st {};
  EXPECT_EQ(::lstat(dir.c_str(), &st), 0);
  return AsideDir{aside_path_of(dir, id).string(), st.st_dev, st.st_ino, st.st_uid};
}

TEST(BackupStore, AsideCopyGoesBackByRenameAndTheRebuiltTreeBecomesLitter) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.cache);
  ino_t ino = inode_of(in.cache);
  BackupStore s(real_disk(), t / "ov");
  AsideDir a = aside_of(in.cache, "n1-ab");
  EXPECT_EQ(fs::path(a.path).filename(), ".cache.overlay-aside-n1-ab");
  s.put_aside(in.cache, a);
  EXPECT_FALSE(fs::exists(in.cache));
  EXPECT_EQ(inode_of(a.path), ino);
  write_file(in.cache / "rebuilt.so", "patched code");  // the candidate's JIT rebuilt it
  EXPECT_TRUE(s.take_back_aside(a, in.cache));
  EXPECT_EQ(inode_of(in.cache), ino);  // the very directory, every attribute kept
  EXPECT_EQ(tree_digest(in.cache), before);
  EXPECT_FALSE(fs::exists(a.path));
  std::vector<std::string> litter = s.take_litter();
  ASSERT_EQ(litter.size(), 1u);
  EXPECT_EQ(read_file(fs::path(litter[0]) / "rebuilt.so"), "patched code");
  EXPECT_FALSE(s.take_back_aside(a, in.cache));  // twice is harmless: the trash is found again
  EXPECT_EQ(s.take_litter(), litter);
  s.purge(litter);
  EXPECT_TRUE(wait_until_gone(litter[0]));
  EXPECT_FALSE(s.take_back_aside(a, in.cache));
  EXPECT_TRUE(s.take_litter().empty());
}

TEST(BackupStore, AnInterruptedTakeBackIsFinishedFromEitherName) {
  TempDir t;
  Install in = make_install(t / "inst");
  BackupStore s(real_disk(), t / "ov");
  AsideDir a = aside_of(in.cache, "n1-ab");
  s.put_aside(in.cache, a);
  // Killed between the exchange and the rename to trash: the original is back, the rebuilt
  // cache sits under the aside name.
  fs::create_directories(in.cache);
  write_file(in.cache / "rebuilt.so", "patched code");
  ASSERT_TRUE(real_disk().exchange(a.path, in.cache));
  EXPECT_FALSE(s.take_back_aside(a, in.cache));
  EXPECT_EQ(inode_of(in.cache), static_cast<ino_t>(a.ino));
  EXPECT_FALSE(fs::exists(a.path));
  std::vector<std::string> litter = s.take_litter();
  ASSERT_EQ(litter.size(), 1u);
  EXPECT_EQ(read_file(fs::path(litter[0]) / "rebuilt.so"), "patched code");
}

TEST(BackupStore, AReplacedOrPlantedAsideCopyIsRefusedAndNothingMoves) {
  TempDir t;
  Install in = make_install(t / "inst");
  BackupStore s(real_disk(), t / "ov");
  AsideDir a = aside_of(in.cache, "n1-ab");
  s.put_aside(in.cache, a);
  write_file(in.cache / "rebuilt.so", "patched code");
  auto refused = [&](const std::string& why) {
    try {
      s.take_back_aside(a, in.cache);
      ADD_FAILURE() << "restored a " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("refusing to restore it"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_file(in.cache / "rebuilt.so"), "patched code") << why;
  };
  // Another directory in its place (same name, another inode).
  fs::rename(a.path, t / "real-original");
  fs::create_directories(a.path);
  write_file(fs::path(a.path) / "evil.so", "x");
  refused("directory planted at the aside name");
  // A symlink to the real original: still not the recorded directory.
  fs::remove_all(a.path);
  fs::create_directory_symlink(t / "real-original", a.path);
  refused("symlink at the aside name");
  // The original itself, but given to another owner.
  fs::remove(a.path);
  fs::rename(t / "real-original", a.path);
  if (::geteuid() == 0) {  // only root can give it away
    ASSERT_EQ(::chown(a.path.c_str(), 65534, 65534), 0);
    refused("copy owned by someone else");
    ASSERT_EQ(::chown(a.path.c_str(), static_cast<uid_t>(a.uid), 0), 0);
  }
  EXPECT_TRUE(s.take_back_aside(a, in.cache));
}

TEST(BackupStore, LargeReplacedFileFreedInTheBackground) {
  TempDir t;
  write_file(t / "inst/big", std::string(17 << 20, 'o'));
  fs::create_directories(t / "ov");
  BackupStore s(real_disk(), t / "ov");
  SavedFile saved = s.save_file(s.new_entry(), "art_0", t / "inst/big");
  write_file(t / "inst/big", std::string(17 << 20, 'r'));  // the rebuild
  EXPECT_TRUE(s.restore_file(saved, t / "inst/big"));
  EXPECT_EQ(file_sha256(t / "inst/big"), saved.sha256);
  EXPECT_EQ(std::distance(fs::directory_iterator(t / "ov/_trash"), fs::directory_iterator()), 1);  // parked, not freed
  s.purge();
  // The background purge removes _trash itself once it is done: gone counts as emptied.
  auto emptied = [&] {
    std::error_code ec;
    bool empty = fs::is_empty(t / "ov/_trash", ec);
    return ec ? !fs::exists(t / "ov/_trash") : empty;
  };
  EXPECT_TRUE(wait_while_progressing(emptied, [&] { return count_entries(t / "ov/_trash"); }));
}

TEST(BackupStore, SweepTakesOnlyEntryDirectoriesNoRecordNames) {
  TempDir t;
  fs::create_directories(t / "ov");
  BackupStore s(real_disk(), t / "ov");
  std::string named = s.new_entry(), by_backup = s.new_entry(), orphan = s.new_entry();
  write_file(t / "ov/_native_backup" / orphan / "art_0_libk.so", "partial");
  write_file(t / "ov/_native_backup/src_0_kernel.cpp", "overlay_setup.py's backup");  // a file, its layout
  fs::create_directories(t / "ov/_native_backup/not-an-id");
  Manifest m;
  m.natives.push_back(NativeEntry{});
  m.natives.back().id = named;
  m.natives.push_back(NativeEntry{});  // a legacy entry: no id, its backups name the dir
  SourceItem legacy;
  legacy.install_path = "/x";
  legacy.backup = "_native_backup/" + by_backup + "/src_0_x";
  m.natives.back().sources.push_back(legacy);
  EXPECT_EQ(s.sweep_unnamed_entries(m), std::vector<std::string>{orphan});
  EXPECT_FALSE(fs::exists(t / "ov/_native_backup" / orphan));
  for (const auto& kept : {named, by_backup, std::string("src_0_kernel.cpp"), std::string("not-an-id")})
    EXPECT_TRUE(fs::exists(t / "ov/_native_backup" / kept)) << kept;
}
