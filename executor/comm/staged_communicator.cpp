// StagedCommunicator (staged_communicator.hpp): device -> staging copy, the
// host group's operation on staging memory, staging -> device copy.
#include "executor/comm/staged_communicator.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace meshplan::exec::comm {

// Host staging buffers from the backend, kept for reuse. A Lease holds one
// until it is destroyed.
class StagingPool {
 public:
  explicit StagingPool(Backend& backend) : backend_(backend) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool() {
    for (const Buffer& b : free_) backend_.deallocate_host_staging(b.pointer, b.bytes);
  }

  struct Buffer {
    std::byte* pointer = nullptr;
    std::size_t bytes = 0;
  };

  class Lease {
   public:
    Lease() = default;
    Lease(std::shared_ptr<StagingPool> pool, Buffer buffer) : pool_(std::move(pool)), buffer_(buffer) {}
    Lease(Lease&& other) noexcept : pool_(std::move(other.pool_)), buffer_(std::exchange(other.buffer_, {})) {}
    Lease& operator=(Lease&& other) noexcept {
      release();
      pool_ = std::move(other.pool_);
      buffer_ = std::exchange(other.buffer_, {});
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    std::byte* data() const { return buffer_.pointer; }

   private:
    void release() {
      if (pool_ && buffer_.pointer != nullptr) pool_->give_back(buffer_);
      buffer_ = {};
      pool_.reset();
    }
    std::shared_ptr<StagingPool> pool_;
    Buffer buffer_;
  };

  // The smallest free buffer of at least `bytes`, or a new one (at least 64 KiB, so small operations share).
  static Lease take(const std::shared_ptr<StagingPool>& pool, std::size_t bytes) {
    StagingPool& p = *pool;
    const std::lock_guard lock(p.mutex_);
    auto best = p.free_.end();
    for (auto it = p.free_.begin(); it != p.free_.end(); ++it) {
      if (it->bytes >= bytes && (best == p.free_.end() || it->bytes < best->bytes)) best = it;
    }
    if (best != p.free_.end()) {
      const Buffer b = *best;
      p.free_.erase(best);
      return Lease(pool, b);
    }
    const std::size_t size = std::max<std::size_t>(bytes, std::size_t{64} << 10);
    auto* pointer = static_cast<std::byte*>(p.backend_.allocate_host_staging(size));
    if (pointer == nullptr) throw std::bad_alloc();
    return Lease(pool, {pointer, size});
  }

 private:
  void give_back(Buffer b) {
    const std::lock_guard lock(mutex_);
    free_.push_back(b);
  }

  Backend& backend_;
  std::mutex mutex_;
  std::vector<Buffer> free_;
};

namespace {

std::size_t bytes_of(std::int64_t count, DataType type) {
  if (count < 0) throw std::invalid_argument("staged communicator: negative count");
  return static_cast<std::size_t>(count) * size_of(type);
}

void to_host(Backend& backend, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  ExecutionContext& context = backend.default_context();
  backend.copy_device_to_host(host, device, bytes, context);
  context.synchronize();
}

void to_device(Backend& backend, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  ExecutionContext& context = backend.default_context();
  backend.copy_host_to_device(device, host, bytes, context);
  context.synchronize();
}

// A host request and what to do once it has completed (copy a result to the
// device); holds the staging buffers until then.
class StagedRequest final : public Request {
 public:
  StagedRequest(std::unique_ptr<Request> inner, std::function<void()> finish, std::vector<StagingPool::Lease> leases)
      : inner_(std::move(inner)), finish_(std::move(finish)), leases_(std::move(leases)) {}
  ~StagedRequest() override {
    if (done_) return;
    // As every Request: destroying an unfinished one waits for it. A failure
    // here has no caller to go to; the host group's watchdog has reported it.
    try {
      wait();
    } catch (...) {
    }
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    complete();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    complete();
    return true;
  }

 private:
  void complete() {
    done_ = true;
    if (finish_) finish_();
    leases_.clear();
  }
  std::unique_ptr<Request> inner_;
  std::function<void()> finish_;
  std::vector<StagingPool::Lease> leases_;
  bool done_ = false;
};

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend)
    : StagedCommunicator(std::move(host), backend, std::make_shared<StagingPool>(backend)) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend,
                                       std::shared_ptr<StagingPool> pool)
    : host_(std::move(host)), backend_(backend), pool_(std::move(pool)) {
  if (!host_) throw std::invalid_argument("staged communicator: no host group");
}

StagedCommunicator::~StagedCommunicator() = default;

void StagedCommunicator::all_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = bytes_of(count, type);
  const auto staging = StagingPool::take(pool_, bytes);
  to_host(backend_, staging.data(), buffer, bytes);
  host_->all_reduce(staging.data(), count, type, op);
  to_device(backend_, buffer, staging.data(), bytes);
}

void StagedCommunicator::all_gather(const void* send, void* recv, std::int64_t count, DataType type) {
  const std::size_t block = bytes_of(count, type);
  const std::size_t total = block * static_cast<std::size_t>(size());
  const auto staging = StagingPool::take(pool_, total);
  std::byte* mine = staging.data() + block * static_cast<std::size_t>(rank());
  to_host(backend_, mine, send, block);
  host_->all_gather(mine, staging.data(), count, type);  // in place: the send block is this rank's block
  to_device(backend_, recv, staging.data(), total);
}

void StagedCommunicator::reduce_scatter(const void* send, void* recv, std::int64_t count, DataType type, ReduceOp op) {
  const std::size_t block = bytes_of(count, type);
  const std::size_t total = block * static_cast<std::size_t>(size());
  const auto in = StagingPool::take(pool_, total);
  const auto out = StagingPool::take(pool_, block);
  to_host(backend_, in.data(), send, total);
  host_->reduce_scatter(in.data(), out.data(), count, type, op);
  to_device(backend_, recv, out.data(), block);
}

void StagedCommunicator::broadcast(void* buffer, std::int64_t count, DataType type, int root) {
  const std::size_t bytes = bytes_of(count, type);
  const auto staging = StagingPool::take(pool_, bytes);
  if (rank() == root) to_host(backend_, staging.data(), buffer, bytes);
  host_->broadcast(staging.data(), count, type, root);
  if (rank() != root) to_device(backend_, buffer, staging.data(), bytes);
}

void StagedCommunicator::all_to_all(const void* send, void* recv, std::int64_t count, DataType type) {
  const std::size_t total = bytes_of(count, type) * static_cast<std::size_t>(size());
  const auto in = StagingPool::take(pool_, total);
  const auto out = StagingPool::take(pool_, total);
  to_host(backend_, in.data(), send, total);
  host_->all_to_all(in.data(), out.data(), count, type);
  to_device(backend_, recv, out.data(), total);
}

void StagedCommunicator::send(const void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  const std::size_t bytes = bytes_of(count, type);
  const auto staging = StagingPool::take(pool_, bytes);
  to_host(backend_, staging.data(), buffer, bytes);
  host_->send(staging.data(), count, type, peer, tag);
}

void StagedCommunicator::recv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  const std::size_t bytes = bytes_of(count, type);
  const auto staging = StagingPool::take(pool_, bytes);
  host_->recv(staging.data(), count, type, peer, tag);
  to_device(backend_, buffer, staging.data(), bytes);
}

std::unique_ptr<Request> StagedCommunicator::isend(const void* buffer, std::int64_t count, DataType type, int peer,
                                                   int tag) {
  const std::size_t bytes = bytes_of(count, type);
  std::vector<StagingPool::Lease> leases;
  leases.push_back(StagingPool::take(pool_, bytes));
  to_host(backend_, leases[0].data(), buffer, bytes);
  auto inner = host_->isend(leases[0].data(), count, type, peer, tag);
  return std::make_unique<StagedRequest>(std::move(inner), nullptr, std::move(leases));
}

std::unique_ptr<Request> StagedCommunicator::irecv(void* buffer, std::int64_t count, DataType type, int peer, int tag) {
  const std::size_t bytes = bytes_of(count, type);
  std::vector<StagingPool::Lease> leases;
  leases.push_back(StagingPool::take(pool_, bytes));
  std::byte* host = leases[0].data();
  auto inner = host_->irecv(host, count, type, peer, tag);
  Backend& backend = backend_;
  return std::make_unique<StagedRequest>(
      std::move(inner), [&backend, buffer, host, bytes] { to_device(backend, buffer, host, bytes); }, std::move(leases));
}

std::unique_ptr<Request> StagedCommunicator::iall_reduce(void* buffer, std::int64_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = bytes_of(count, type);
  std::vector<StagingPool::Lease> leases;
  leases.push_back(StagingPool::take(pool_, bytes));
  std::byte* host = leases[0].data();
  to_host(backend_, host, buffer, bytes);
  auto inner = host_->iall_reduce(host, count, type, op);
  Backend& backend = backend_;
  return std::make_unique<StagedRequest>(
      std::move(inner), [&backend, buffer, host, bytes] { to_device(backend, buffer, host, bytes); }, std::move(leases));
}

std::unique_ptr<Request> StagedCommunicator::iall_gather(const void* send, void* recv, std::int64_t count,
                                                         DataType type) {
  const std::size_t block = bytes_of(count, type);
  const std::size_t total = block * static_cast<std::size_t>(size());
  std::vector<StagingPool::Lease> leases;
  leases.push_back(StagingPool::take(pool_, total));
  std::byte* host = leases[0].data();
  std::byte* mine = host + block * static_cast<std::size_t>(rank());
  to_host(backend_, mine, send, block);
  auto inner = host_->iall_gather(mine, host, count, type);
  Backend& backend = backend_;
  return std::make_unique<StagedRequest>(
      std::move(inner), [&backend, recv, host, total] { to_device(backend, recv, host, total); }, std::move(leases));
}

std::unique_ptr<Request> StagedCommunicator::ireduce_scatter(const void* send, void* recv, std::int64_t count,
                                                             DataType type, ReduceOp op) {
  const std::size_t block = bytes_of(count, type);
  const std::size_t total = block * static_cast<std::size_t>(size());
  std::vector<StagingPool::Lease> leases;
  leases.push_back(StagingPool::take(pool_, total));
  leases.push_back(StagingPool::take(pool_, block));
  std::byte* in = leases[0].data();
  std::byte* out = leases[1].data();
  to_host(backend_, in, send, total);
  auto inner = host_->ireduce_scatter(in, out, count, type, op);
  Backend& backend = backend_;
  return std::make_unique<StagedRequest>(
      std::move(inner), [&backend, recv, out, block] { to_device(backend, recv, out, block); }, std::move(leases));
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, const std::string& name) {
  return std::unique_ptr<Communicator>(new StagedCommunicator(host_->split(color, key, name), backend_, pool_));
}

}  // namespace meshplan::exec::comm
