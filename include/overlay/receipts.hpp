#pragma once
// Receipts: what each process of one run of a command executed, as evidence a measurement can be
// bound to (`exec --json`: the reference ran none of the candidate's code, the candidate all of
// it). A run's processes are seen two ways. The runtime of every Python process with an overlay on
// PYTHONPATH writes its own receipt when OVERLAY_RECEIPTS names a directory: the overlays it
// applied (the SHA-256 of the manifest bytes it read), the SHA-256 of the very bytes of every
// source it served, and at exit the files it maps. And the run's process tree (the command and
// its descendants) is sampled while it runs: the tracked artifacts each process maps, by device
// and inode. At the run's end each mapped artifact still at its path is hashed once.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

inline constexpr const char* kReceiptsEnv = "OVERLAY_RECEIPTS";

// Which code a digest is: the candidate's build, the install's original, neither, or not known
// (the file was replaced before the run ended, or nothing was recorded to compare with).
enum class CodeIs { candidate, original, other, unknown };
const char* to_string(CodeIs c);

struct ReceiptOverlay {
  std::string root, manifest_sha256;
  std::optional<std::string> sitecustomize_sha256;
};

struct ReceiptFile {
  std::string path, sha256;  // a source the runtime served; the digest of the bytes it compiled
  bool candidate = false;    // under the candidate's overlay
};

struct ReceiptArtifact {
  std::string path;  // the tracked artifact, as the entry names it
  dev_t dev = 0;
  ino_t ino = 0;
  std::optional<std::string> sha256;  // none: that inode was no longer at the path at the run's end
  CodeIs is = CodeIs::unknown;
};

struct ProcessReceipt {
  pid_t pid = 0, ppid = 0;
  std::uint64_t start_ticks = 0;
  std::string cmdline;
  bool by_runtime = false, sampled = false;  // how it was seen
  std::vector<ReceiptOverlay> overlays;
  std::vector<ReceiptFile> files;
  std::vector<ReceiptArtifact> artifacts;
  bool ran_candidate() const;
};

struct RunReceipts {
  std::vector<ProcessReceipt> processes;  // by pid
  std::size_t samples = 0;                // ticks the process tree was read
  std::vector<std::string> problems;      // receipts that could not be read whole
};
void to_json(nlohmann::json& j, const RunReceipts& r);

// The candidate's code: its overlay (files under it are the candidate's) and, per tracked
// artifact path, the original's digest and the candidate's build's.
struct CandidateCode {
  fs::path overlay;
  std::map<std::string, std::string> original, built;
};
// From `m`'s native entries: each artifact's recorded original, and the file at its path now
// hashed (call it while the candidate's build is in place).
CandidateCode candidate_code(Disk& disk, const fs::path& overlay, const Manifest& m);
// Says of each file and artifact of `r` whose code it is.
void label(RunReceipts& r, const CandidateCode& code);

// One run's receipts, from the start of the run to its end.
class ReceiptCollector {
 public:
  // `dir`: a fresh directory for the runtime's receipts (made here, removed by finish());
  // `artifacts`: the tracked paths whose mappings count.
  ReceiptCollector(Disk& disk, fs::path dir, const std::vector<std::string>& artifacts);
  std::string env() const { return std::string(kReceiptsEnv) + "=" + dir_.string(); }
  // The tree under `root` now: each process's mappings of a tracked artifact. Never throws.
  void sample(pid_t root);
  // The runtime's receipts merged with the samples, each mapped artifact hashed; the directory
  // removed. Call it once the run ended and before anything replaces its artifacts.
  RunReceipts finish();

 private:
  ProcessReceipt& process(pid_t pid, std::uint64_t ticks);
  void read_runtime_receipt(const fs::path& file, RunReceipts& out);
  void add_mapping(ProcessReceipt& p, const std::string& mapped, dev_t dev, ino_t ino);

  Disk& disk_;
  fs::path dir_;
  std::map<std::string, std::string> watched_;  // a path as maps names it -> the tracked path
  std::map<std::pair<pid_t, std::uint64_t>, ProcessReceipt> seen_;
  std::size_t samples_ = 0;
};

// Deletes the receipt directories under `parent` whose run (named "<pid>-<ticks>-…") is gone: what
// a killed exec left.
void sweep_receipt_dirs(Disk& disk, const fs::path& parent);

}  // namespace overlay
