// Micro-benchmarks (Google Benchmark): SHA-256 and copy-while-hashing throughput in bytes/s,
// next to OpenSSL's own one-shot rate on the same buffer.
//   build/bench/overlay_micro_bench [--benchmark_filter=...]
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include "overlay/disk.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kBytes = 64u << 20;

const std::vector<char>& buffer() {
  static const std::vector<char> buf = [] {
    std::vector<char> b(kBytes);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>((i * 2654435761u) >> 11);
    return b;
  }();
  return buf;
}

// The floor: OpenSSL's EVP one-shot digest of the whole buffer.
void BM_OpenSslEvpDigest(benchmark::State& state) {
  const auto& b = buffer();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  for (auto _ : state) {
    EVP_Digest(b.data(), b.size(), md, &len, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(md);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(b.size()));
}
BENCHMARK(BM_OpenSslEvpDigest)->Unit(benchmark::kMillisecond)->UseRealTime();

// overlay's streaming Sha256, fed in 1 MiB chunks as the file paths feed it.
void BM_OverlaySha256Streaming(benchmark::State& state) {
  const auto& b = buffer();
  for (auto _ : state) {
    overlay::Sha256 h;
    for (std::size_t off = 0; off < b.size(); off += 1 << 20) h.update(b.data() + off, 1 << 20);
    benchmark::DoNotOptimize(h.finish_hex());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(b.size()));
}
BENCHMARK(BM_OverlaySha256Streaming)->Unit(benchmark::kMillisecond)->UseRealTime();

struct TempFiles {
  fs::path dir;
  TempFiles() {
    std::string tmpl = (fs::temp_directory_path() / "overlay-bench.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    std::ofstream(dir / "src", std::ios::binary).write(buffer().data(), static_cast<std::streamsize>(kBytes));
  }
  ~TempFiles() { fs::remove_all(dir); }
};

// hash_file: read ahead on one thread, hash on the other (page cache warm).
void BM_HashFile(benchmark::State& state) {
  TempFiles t;
  for (auto _ : state) benchmark::DoNotOptimize(overlay::hash_file(overlay::real_disk(), t.dir / "src"));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
}
BENCHMARK(BM_HashFile)->Unit(benchmark::kMillisecond)->UseRealTime();

// copy_file_hashing without fsync: the copy and the hash running on both cores.
void BM_CopyFileHashing(benchmark::State& state) {
  TempFiles t;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        overlay::copy_file_hashing(overlay::real_disk(), t.dir / "src", t.dir / "dst", 0644, overlay::Durable::no)
            .sha256);
    state.PauseTiming();
    fs::remove(t.dir / "dst");
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
}
BENCHMARK(BM_CopyFileHashing)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
