#include "overlay/holds.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/manifest.hpp"
#include "overlay/stack.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(HoldRegistry, ReleaseDropsOnlyOwnHoldsOnceNotRecorded) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path a = t / "a", b = t / "b";
  (void)claim_files(reg, {a, b}, t / "ov", false, 1);
  record_native_change(t / "ov", b);
  Manifest recorded = *load_manifest(real_disk(), t / "ov");
  reg.release({a, b}, t / "other", recorded, 1);  // not its holds
  EXPECT_TRUE(reg.holder(a));
  reg.release({a, b}, t / "ov", recorded, 1);
  EXPECT_FALSE(reg.holder(a));  // no longer recorded: dropped
  EXPECT_TRUE(reg.holder(b));   // still recorded by the overlay: kept
}

// Issue 49, found by the claims checker: a lower layer reverted (by gc-stale) while a candidate's
// add-native --over it had claimed the file but not yet recorded its entry. The candidate's
// overlay has no record yet, so it looked vanished, and release() dropped its hold: a third
// add-native then took the file over while the candidate built. While a claim lives, the hold
// stays; once the claimant is really gone (no claim, no record), the lower's revert drops it.
// Found by the claims checker (issue 49): a candidate's add-native --over the accepted overlay killed
// before its record left its hold on top; `exec --ref` of another agent asked why_taken, which
// judged only that holder (gone, the file at the bytes it found) and let the reference run over
// the accepted overlay's change. The layer under it still holds the file.
// Found by the claims checker with archived copies (issue 50, seed 3577846253): a candidate
// stacked on the accepted overlay killed before its record left the hold with the candidate on top;
// a copy of the accepted overlay then passed for no one's, and its revert put the original over
// the accepted change. The layer under a top that no longer records the file holds it.
// Found by a probe (issue 49): a layer's revert killed after its record dropped the entry and before
// it released its holds left the layer on top of a hold nothing cleared: once the layer under it
// was reverted too, the install was pristine and `status --all` NOT clean for ever. A layer above
// that no longer records the file goes with the revert of the one under it.
// A middle layer deleted (rm -rf) and the file pristine again (every live layer reverted around
// it): the vanished layer does not keep a hold over bytes that are none of its own.
// Found by the claims checker (issue 49, seed 1222697785): the accepted overlay deleted (rm -rf)
// and made again at its path with other changes, under a candidate stacked on it; the candidate's
// revert put back what it found, the accepted overlay's build, and dropped the hold: the library
// held a build whose original was lost, and `status --all --check-clean` said clean. The layer
// under it keeps the hold while the file holds anything but the bytes from before the stack.
// Found by the claims checker (issue 50, seed 647990305): a candidate killed after its claim on
// top of the accepted overlay (never recorded), then the accepted overlay deleted with its
// backups. The candidate's hold calls the accepted overlay's patched bytes its "original"; a third
// overlay judging only that took them for the original. The layers under it are judged too.
// An agent's next candidate into its own overlay, claimed while gc-stale reverts that overlay's
// stale entry (issue 50: the hold went with the stale entry's release, the new entry was recorded
// with none, and a third overlay took the file without --force). The claim keeps its hold.
TEST(HoldRegistry, ARevertOfAStaleEntryLeavesTheHoldANewClaimOnItsOverlayTook) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", ov = t / "ov";
  write_file(file, "pristine\n");
  (void)claim_files(reg, {file}, ov, false, 1);
  record_native_change(ov, file);  // the dead run's entry
  {
    HoldClaim next = claim_files(reg, {file}, ov, false, 1);  // the next candidate, not yet recorded
    reg.release({file}, ov, Manifest{}, 1);                   // gc-stale reverted the stale entry
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
