#include "overlay/copy_pipeline.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/progress.hpp"

namespace overlay {
namespace {

constexpr std::size_t kChunk = 1 << 20;

// A heap buffer whose bytes are not zeroed first (a std::vector<char> would write every page).
std::unique_ptr<char[]> uninitialized_buffer(std::size_t n) { return std::unique_ptr<char[]>(new char[n]); }

// A ring of chunk buffers from one producer to several consumers: the producer fills a buffer
// and publishes it; every consumer takes every buffer in order and gives it back; a buffer is
// refilled once all consumers gave it back. Any side may fail; the others then stop at their
// next wait. Reading, writing and hashing thus run at once, each on its own thread.
class ChunkRing {
 public:
  static constexpr std::size_t kSlots = 8;

  explicit ChunkRing(std::size_t consumers) : done_(consumers, 0) {
    for (auto& b : bufs_) b = uninitialized_buffer(kChunk);
  }
  // Producer: the next free buffer (nullptr once a consumer failed).
  char* acquire() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return published_ - slowest() < kSlots || failed_; });
    return failed_ ? nullptr : bufs_[published_ % kSlots].get();
  }
  // Producer: the buffer from acquire() holds n bytes; n == 0 marks the end.
  void publish(std::size_t n) {
    std::lock_guard<std::mutex> l(m_);
    sizes_[published_ % kSlots] = n;
    ++published_;
    cv_.notify_all();
  }
  // Consumer c: its next published buffer and its size (size 0: end, or another side failed).
  std::pair<const char*, std::size_t> take(std::size_t c) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return done_[c] < published_ || failed_; });
    if (done_[c] == published_) return {nullptr, 0};
    return {bufs_[done_[c] % kSlots].get(), sizes_[done_[c] % kSlots]};
  }
  // Consumer c: done with the buffer from take(c).
  void release(std::size_t c) {
    std::lock_guard<std::mutex> l(m_);
    ++done_[c];
    cv_.notify_all();
  }
  void fail() {
    std::lock_guard<std::mutex> l(m_);
    failed_ = true;
    cv_.notify_all();
  }

 private:
  std::uint64_t slowest() const { return *std::min_element(done_.begin(), done_.end()); }

  std::mutex m_;
  std::condition_variable cv_;
  std::array<std::unique_ptr<char[]>, kSlots> bufs_;
  std::array<std::size_t, kSlots> sizes_{};
  std::uint64_t published_ = 0;
  std::vector<std::uint64_t> done_;  // buffers each consumer has given back
  bool failed_ = false;
};

// Runs produce() on this thread and each consumer on a thread of its own over a ChunkRing;
// rethrows the first failure of any.
void run_pipeline(ChunkRing& ring, const std::function<void()>& produce,
                  const std::vector<std::function<void()>>& consumers) {
  std::vector<std::exception_ptr> errors(consumers.size());
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < consumers.size(); ++c)
    threads.emplace_back([&, c] {
      try {
        consumers[c]();
      } catch (...) {
        errors[c] = std::current_exception();
        ring.fail();
      }
    });
  std::exception_ptr producer_error;
  try {
    produce();
  } catch (...) {
    producer_error = std::current_exception();
    ring.fail();
  }
  for (auto& t : threads) t.join();
  if (producer_error) std::rethrow_exception(producer_error);
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Consumer c: hands every buffer the ring delivers to `use` until the end marker.
void drain(ChunkRing& ring, std::size_t c, const std::function<void(const char*, std::size_t)>& use) {
  for (;;) {
    auto [buf, n] = ring.take(c);
    if (n == 0) return;
    use(buf, n);
    ring.release(c);
  }
}

// Reads `in` to the end on this thread while one thread hashes the chunks and, when `out` is
// given, another writes them: every byte is read once, and reading, hashing and writing overlap.
void stream_hashing(ReadHandle& in, Sha256& h, WriteHandle* out, bool durable, ProgressMeter& meter) {
  ChunkRing ring(out != nullptr ? 2 : 1);
  std::uint64_t written = 0;
  std::vector<std::function<void()>> consumers{
      [&] { drain(ring, 0, [&](const char* b, std::size_t n) { h.update(b, n); }); }};
  if (out != nullptr)
    consumers.push_back([&] {
      drain(ring, 1, [&](const char* b, std::size_t n) {
        out->write(b, n);
        // Every 8 MiB: the disk starts writing while we copy, instead of all at the final fsync.
        if (durable && (written += n) % (8u << 20) < n) out->start_writeback();
      });
    });
  run_pipeline(
      ring,
      [&] {
        for (;;) {
          char* buf = ring.acquire();
          if (buf == nullptr) return;
          std::size_t n = in.read(buf, kChunk);
          ring.publish(n);
          meter.advance(n);
          if (n == 0) return;
        }
      },
      consumers);
}

}  // namespace

// Small files are copied on this thread: a second thread costs more than it saves. The buffer
// fits the file (one read more sees the end): zeroing and faulting in a whole chunk for a 20-byte
// source was most of a small add-native.
static std::string copy_small_hashing(ReadHandle& in, WriteHandle& out, std::uint64_t size) {
  Sha256 h;
  std::size_t cap = static_cast<std::size_t>(std::min<std::uint64_t>(size + 1, kChunk));
  auto buf = uninitialized_buffer(cap);
  while (std::size_t n = in.read(buf.get(), cap)) {
    h.update(buf.get(), n);
    out.write(buf.get(), n);
  }
  return h.finish_hex();
}

namespace {

// The file's identity and last change, to tell whether it changed while it was cloned and hashed.
bool same_version(const FileInfo& a, const FileInfo& b) {
  return a.ino == b.ino && a.dev == b.dev && a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec &&
         a.mtime.tv_nsec == b.mtime.tv_nsec && a.ctime.tv_sec == b.ctime.tv_sec && a.ctime.tv_nsec == b.ctime.tv_nsec;
}

std::string hash_stream(ReadHandle& in, std::uint64_t size, const std::string& label) {
  Sha256 h;
  ProgressMeter meter(size >= kProgressMinBytes ? label : std::string(), size);
  stream_hashing(in, h, nullptr, false, meter);
  return h.finish_hex();
}

// The kernel copies src into out (copy_file_range, on another thread) while this thread hashes
// src: no byte of the copy passes through user space, and hashing — the one step that must see
// every byte — sets the pace. False, with out still empty, where the kernel cannot copy.
bool kernel_copy_while_hashing(ReadHandle& in, WriteHandle& out, const At& src, std::uint64_t size, std::string& sha) {
  bool copied = false;
  std::exception_ptr failed;
  std::thread copier([&] {
    try {
      copied = out.copy_from(src);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  try {
    sha = hash_stream(in, size, "copy " + src.filename());
  } catch (...) {
    copier.join();
    throw;
  }
  copier.join();
  if (failed) std::rethrow_exception(failed);
  return copied;
}

// Whether a file has holes: fewer blocks allocated than its size needs (a margin for the
// filesystem's own rounding). Such a file is copied by its data alone.
bool has_holes(const FileInfo& fi) { return fi.blocks * 512 + (64u << 10) < fi.size; }

// SHA-256 input of n zero bytes: what a hole reads as, without reading it.
void hash_zeros(Sha256& h, std::uint64_t n) {
  static const std::vector<char> zeros(kChunk, '\0');
  while (n > 0) {
    auto k = static_cast<std::size_t>(std::min<std::uint64_t>(n, kChunk));
    h.update(zeros.data(), k);
    n -= k;
  }
}

// Copies a file with holes by its data alone (SEEK_DATA/SEEK_HOLE): each run of data is read,
// hashed and written; each hole is left a hole in the copy and hashed as the zeros it reads as.
// Costs what the data costs on disk (the zeros are still hashed).
// Without `out`, only hashes.
std::string copy_sparse_hashing(ReadHandle& in, WriteHandle* out, std::uint64_t size, ProgressMeter& meter) {
  Sha256 h;
  auto buf = uninitialized_buffer(kChunk);
  std::uint64_t pos = 0, start = 0, end = 0;
  while (pos < size && in.next_data(start, end)) {
    if (start < pos || start > size) throw Error("a file with holes changed while it was copied");
    hash_zeros(h, start - pos);
    if (out != nullptr) out->skip(start - pos);
    for (pos = start, end = std::min(end, size); pos < end;) {
      std::size_t n = in.read(buf.get(), static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, end - pos)));
      if (n == 0) throw Error("a file with holes shrank while it was copied");
      h.update(buf.get(), n);
      if (out != nullptr) out->write(buf.get(), n);
      pos += n;
    }
    meter.advance(end - start);
  }
  hash_zeros(h, size - pos);
  if (out != nullptr) out->skip(size - pos);
  return h.finish_hex();
}

Copied finish(WriteHandle& out, Durable durable, std::string sha, CopyWay way) {
  if (durable == Durable::yes) out.sync();
  out.close();
  return {std::move(sha), way};
}

}  // namespace

Copied copy_file_hashing(Disk& disk, const At& src, const At& dest, mode_t mode, Durable durable) {
  auto in = disk.open_read(src);
  auto out = disk.create(dest, mode, CreateMode::exclusive);
  FileInfo before = disk.info(src, Follow::yes);
  std::uint64_t size = before.size;
  if (size <= kChunk) return finish(*out, durable, copy_small_hashing(*in, *out, size), CopyWay::streamed);
  std::string sha;
  CopyWay way = CopyWay::kernel;
  if (out->clone_from(src)) {
    // Copy-on-write: the blocks are shared at once; what is left is one read to hash them.
    way = CopyWay::cloned;
    sha = hash_stream(*in, size, "hash " + src.filename());
  } else if (has_holes(before) && in->knows_holes()) {
    // A kernel copy would fill every hole with allocated zeros: a 5 GiB sparse file, 5 GiB.
    ProgressMeter meter(size >= kProgressMinBytes ? "copy " + src.filename() : std::string(), before.blocks * 512);
    sha = copy_sparse_hashing(*in, out.get(), size, meter);
    way = CopyWay::streamed;
  } else if (!kernel_copy_while_hashing(*in, *out, src, size, sha)) {
    // Neither: every byte through here, read once, hashed and written on their own threads.
    Sha256 h;
    in = disk.open_read(src);
    ProgressMeter meter(size >= kProgressMinBytes ? "copy " + src.filename() : std::string(), size);
    stream_hashing(*in, h, out.get(), durable == Durable::yes, meter);
    return finish(*out, durable, h.finish_hex(), CopyWay::streamed);
  }
  // The source was hashed, not the copy: trusted only if it did not change meanwhile (its pages
  // were likely cached, the copy's not); otherwise the copy's own bytes are hashed.
  if (!same_version(before, disk.info(src, Follow::yes))) sha = hash_file(disk, dest);
  return finish(*out, durable, std::move(sha), way);
}

std::string hash_file(DiskReader& disk, const At& p) {
  auto in = disk.open_read(p);
  Sha256 h;
  FileInfo fi = disk.info(p, p.dir() != nullptr ? Follow::no : Follow::yes);
  std::uint64_t size = fi.size;
  if (has_holes(fi) && in->knows_holes()) {  // the holes hashed as zeros, never read
    ProgressMeter meter(size >= kProgressMinBytes ? "hash " + p.filename() : std::string(), fi.blocks * 512);
    return copy_sparse_hashing(*in, nullptr, size, meter);
  }
  if (size <= kChunk) {
    std::size_t cap = static_cast<std::size_t>(size + 1);
    auto buf = uninitialized_buffer(cap);
    while (std::size_t n = in->read(buf.get(), cap)) h.update(buf.get(), n);
    return h.finish_hex();
  }
  return hash_stream(*in, size, "hash " + p.filename());
}

}  // namespace overlay
