#include "overlay/holds.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/manifest.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {
// An overlay whose manifest records a native change to `path` (what makes a hold live).
void record_change(const fs::path& ov, const fs::path& path) {
  Manifest m;
  NativeEntry e;
  SourceItem s;
  s.install_path = path.string();
  s.backup = "_native_backup/x";
  s.sha256 = std::string(64, 'a');
  e.sources.push_back(s);
  m.natives.push_back(e);
  fs::create_directories(ov);
  save_manifest(real_disk(), ov, m);
}
}  // namespace

TEST(HoldRegistry, LiveHoldRefusesOthersStaleHoldDoesNot) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  (void)reg.acquire({file}, t / "ov1", false, 1);
  EXPECT_EQ(*reg.holder(file), t / "ov1");
  // ov1 records nothing yet: the hold is stale and another overlay may take it.
  (void)reg.acquire({file}, t / "ov2", false, 1);
  record_change(t / "ov2", file);
  try {
    (void)reg.acquire({file}, t / "ov1", false, 1);
    FAIL() << "a live hold was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("held by overlay " + (t / "ov2").string()), std::string::npos) << e.what();
  }
  (void)reg.acquire({file}, t / "ov2", false, 1);  // the holder itself may stack
  (void)reg.acquire({file}, t / "ov1", true, 1);   // --force
  EXPECT_EQ(*reg.holder(file), t / "ov1");
}

TEST(HoldRegistry, ReleaseDropsOnlyOwnHoldsOnceNotRecorded) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path a = t / "a", b = t / "b";
  (void)reg.acquire({a, b}, t / "ov", false, 1);
  record_change(t / "ov", b);
  Manifest recorded = *load_manifest(real_disk(), t / "ov");
  reg.release({a, b}, t / "other", recorded, 1);  // not its holds
  EXPECT_TRUE(reg.holder(a));
  reg.release({a, b}, t / "ov", recorded, 1);
  EXPECT_FALSE(reg.holder(a));  // no longer recorded: dropped
  EXPECT_TRUE(reg.holder(b));   // still recorded by the overlay: kept
}

TEST(HoldRegistry, AClaimInProgressMakesAnotherWaitThenGiveBackRestoresThePreviousHolder) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  record_change(t / "ov0", file);
  (void)reg.acquire({file}, t / "ov0", false, 1);
  {
    HoldClaim forced = reg.acquire({file}, t / "ov1", true, 1);  // ov1 records nothing yet
    // Its hold looks stale (ov1's manifest names no change), yet while the claim lives no
    // other acquire may judge the path: it waits, here past its timeout.
    EXPECT_THROW((void)reg.acquire({file}, t / "ov2", false, 0.2), LockTimeout);
    reg.give_back(forced, t / "ov1", 1);  // ov1's add-native failed before recording
  }
  EXPECT_EQ(*reg.holder(file), t / "ov0");
  HoldClaim fresh = reg.acquire({t / "free"}, t / "ov3", false, 1);
  reg.give_back(fresh, t / "ov3", 1);
  EXPECT_FALSE(reg.holder(t / "free"));
}

// Issue 49, found by the claims checker: a lower layer reverted (by gc-stale) while a candidate's
// add-native --over it had claimed the file but not yet recorded its entry. The candidate's
// overlay has no record yet, so it looked vanished, and release() dropped its hold: a third
// add-native then took the file over while the candidate built. While a claim lives, the hold
// stays; once the claimant is really gone (no claim, no record), the lower's revert drops it.
TEST(HoldRegistry, ALowersRevertLeavesTheHoldOfACandidateStillClaimingTheFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low", cand = t / "cand";
  record_change(low, file);
  (void)reg.acquire({file}, low, false, 1);
  Manifest reverted;  // the lower's record once its entry is reverted
  {
    HoldClaim claim = reg.acquire({file}, cand, false, 1, low);  // layered on low; cand records nothing yet
    ASSERT_EQ(*reg.holder(file), cand);
    ASSERT_EQ(reg.hold_of(file)->under.at(0).overlay, low);
    reg.release({file}, low, reverted, 1);
    EXPECT_EQ(*reg.holder(file), cand) << "a claim in progress lost its hold";
  }
  // The claim ended without a record (the candidate's add-native died): its overlay is gone, the
  // layer under it reverted; the hold goes.
  reg.release({file}, low, reverted, 1);
  EXPECT_FALSE(reg.holder(file));
}

// Found by the claims checker (issue 49): a candidate's add-native --over the accepted overlay killed
// before its record left its hold on top; `exec --ref` of another agent asked why_taken, which
// judged only that holder (gone, the file at the bytes it found) and let the reference run over
// the accepted overlay's change. The layer under it still holds the file.
TEST(HoldRegistry, ALayerUnderAHolderThatNeverRecordedStillHoldsTheFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low";
  write_file(file, "low's\n");
  (void)reg.acquire({file}, low, false, 1);
  record_change(low, file);
  {
    HoldClaim killed = reg.acquire({file}, t / "cand", false, 1, low);
  }  // killed before its record: nothing given back
  ASSERT_EQ(*reg.holder(file), t / "cand");
  auto why = reg.why_taken(file, t / "other");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("held by overlay " + low.string()), std::string::npos) << *why;
  EXPECT_FALSE(reg.why_taken(file, t / "other", low)) << "stacking on it is what --over asks";
}

// Found by the claims checker with archived copies (issue 50, seed 3577846253): a candidate
// stacked on the accepted overlay killed before its record left the hold with the candidate on top;
// a copy of the accepted overlay then passed for no one's, and its revert put the original over
// the accepted change. The layer under a top that no longer records the file holds it.
TEST(HoldRegistry, ALiveLayerUnderATopThatLetGoHoldsTheFileInsteadOfACopy) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", acc = t / "acc", copy = t / "archive/acc";
  write_file(file, "accepted\n");
  (void)reg.acquire({file}, acc, false, 1);
  record_change(acc, file);
  { HoldClaim killed = reg.acquire({file}, t / "cand", false, 1, acc); }  // killed before its record
  record_change(copy, file);                                              // cp -a of the accepted overlay
  auto instead = reg.held_instead(file, copy);
  ASSERT_TRUE(instead) << "the copy's revert would write over the accepted overlay's change";
  EXPECT_EQ(*instead, acc);
  EXPECT_FALSE(reg.held_instead(file, acc)) << "the accepted overlay itself is no copy";
}

// Found by a probe (issue 49): a layer's revert killed after its record dropped the entry and before
// it released its holds left the layer on top of a hold nothing cleared: once the layer under it
// was reverted too, the install was pristine and `status --all` NOT clean for ever. A layer above
// that no longer records the file goes with the revert of the one under it.
TEST(HoldRegistry, ALayerAboveThatNoLongerRecordsTheFileGoesWithTheRevertUnderIt) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low", up = t / "up";
  write_file(file, "pristine\n");
  record_change(low, file);
  (void)reg.acquire({file}, low, false, 1);
  (void)reg.acquire({file}, up, false, 1, low);
  record_change(up, file);
  save_manifest(real_disk(), up, Manifest{});  // the upper's revert, killed before its release
  ASSERT_EQ(*reg.holder(file), up);
  reg.release({file}, low, Manifest{}, 1);
  EXPECT_FALSE(reg.holder(file));
}

// A middle layer deleted (rm -rf) and the file pristine again (every live layer reverted around
// it): the vanished layer does not keep a hold over bytes that are none of its own.
TEST(HoldRegistry, AVanishedMiddleLayerKeepsNoHoldOverThePristineFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", a = t / "a", b = t / "b", c = t / "c";
  write_file(file, "pristine\n");
  (void)reg.acquire({file}, a, false, 1, std::nullopt);
  record_change(a, file);
  write_file(file, "a's\n");
  (void)reg.acquire({file}, b, false, 1, a);
  record_change(b, file);
  write_file(file, "b's\n");
  (void)reg.acquire({file}, c, false, 1, b);
  record_change(c, file);
  fs::remove_all(b);                          // the harness
  save_manifest(real_disk(), a, Manifest{});  // a reverted (the file pristine again)
  write_file(file, "pristine\n");
  save_manifest(real_disk(), c, Manifest{});  // c reverted: its bytes gave way
  reg.release({file}, c, Manifest{}, 1);
  EXPECT_FALSE(reg.holder(file)) << "a vanished layer kept a hold over the pristine file";
}

// Found by the claims checker (issue 49, seed 1222697785): the accepted overlay deleted (rm -rf)
// and made again at its path with other changes, under a candidate stacked on it; the candidate's
// revert put back what it found, the accepted overlay's build, and dropped the hold: the library
// held a build whose original was lost, and `status --all --check-clean` said clean. The layer
// under it keeps the hold while the file holds anything but the bytes from before the stack.
TEST(HoldRegistry, ALayerMadeAgainAtItsPathKeepsTheHoldOverBytesThatAreNotPristine) {
  for (bool pristine : {false, true}) {
    TempDir t;
    HoldRegistry reg(real_disk(), t / "state");
    fs::path file = t / "inst/k.cu", acc = t / "acc", cand = t / "cand";
    write_file(file, "pristine\n");
    (void)reg.acquire({HeldFile(file, sha256_hex(std::string("acc's\n")))}, acc, false, 1);
    record_change(acc, file);
    write_file(file, "acc's\n");
    (void)reg.acquire({HeldFile(file, sha256_hex(std::string("cand's\n")))}, cand, false, 1, acc);
    record_change(cand, file);
    write_file(file, "cand's\n");
    fs::remove_all(acc);  // the harness
    fs::create_directories(acc);
    save_manifest(real_disk(), acc, Manifest{});            // made again: records none of the file
    write_file(file, pristine ? "pristine\n" : "acc's\n");  // cand reverted: what it found, or a reinstall
    save_manifest(real_disk(), cand, Manifest{});
    reg.release({file}, cand, Manifest{}, 1);
    if (pristine) {
      EXPECT_FALSE(reg.holder(file)) << "a hold kept over the pristine file";
      continue;
    }
    ASSERT_TRUE(reg.holder(file)) << "the hold on bytes whose original is lost was dropped";
    EXPECT_EQ(*reg.holder(file), acc);
    auto o = reg.orphan_of(file);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->file_state, "patched") << o->describe();
  }
}

// Found by the claims checker (issue 50, seed 647990305): a candidate killed after its claim on
// top of the accepted overlay (never recorded), then the accepted overlay deleted with its
// backups. The candidate's hold calls the accepted overlay's patched bytes its "original"; a third
// overlay judging only that took them for the original. The layers under it are judged too.
TEST(HoldRegistry, ALostOriginalUnderAVanishedHolderIsStillLost) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", acc = t / "acc", cand = t / "cand", other = t / "other";
  write_file(file, "pristine\n");
  (void)reg.acquire({HeldFile(file, sha256_hex(std::string("acc's\n")))}, acc, false, 1);
  record_change(acc, file);
  write_file(file, "acc's\n");
  { HoldClaim killed = reg.acquire({HeldFile(file, sha256_hex(std::string("cand's\n")))}, cand, false, 1, acc); }
  fs::remove_all(acc);  // the harness, with the only copy of the original
  auto why = reg.why_taken(file, other);
  ASSERT_TRUE(why) << "the accepted overlay's bytes passed for the original";
  EXPECT_NE(why->find(acc.string()), std::string::npos) << *why;
  EXPECT_THROW((void)reg.acquire({file}, other, false, 1), Error);
  EXPECT_NO_THROW((void)reg.acquire({file}, other, true, 1)) << "--force stays the loss path";
}

// An agent's next candidate into its own overlay, claimed while gc-stale reverts that overlay's
// stale entry (issue 50: the hold went with the stale entry's release, the new entry was recorded
// with none, and a third overlay took the file without --force). The claim keeps its hold.
TEST(HoldRegistry, ARevertOfAStaleEntryLeavesTheHoldANewClaimOnItsOverlayTook) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", ov = t / "ov";
  write_file(file, "pristine\n");
  (void)reg.acquire({file}, ov, false, 1);
  record_change(ov, file);  // the dead run's entry
  {
    HoldClaim next = reg.acquire({file}, ov, false, 1);  // the next candidate, not yet recorded
    reg.release({file}, ov, Manifest{}, 1);              // gc-stale reverted the stale entry
    ASSERT_TRUE(reg.holder(file)) << "the claim in progress lost its hold";
    EXPECT_EQ(*reg.holder(file), ov);
  }
}

// A cluster's shared home holds every node's registry: each host gets its own there (issue 42),
// and a local home keeps the one directory it always had.
TEST(HoldRegistry, StateDirIsPerHostOnlyOnANetworkFilesystem) {
  fs::path base = "/home/u/.local/state/overlay";
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x6969, "node7"), base / "host-node7");      // NFS
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x0BD00BD0, "node7"), base / "host-node7");  // Lustre
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0xEF53, "node7"), base);                     // ext4
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x01021994, "node7"), base);                 // tmpfs
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x6969, ""), base);
}
